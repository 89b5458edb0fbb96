// Happens-before among the accessors of one CTA's shared memory, kept as vector clocks (the
// representation of the FastTrack race detector, Flanagan and Freund, PLDI 2009), for the
// sanitizer's race checks (shared_shadow.h).
//
// Actors are the CTA's threads (0 .. threads - 1) and, past them, one actor per initialized
// mbarrier standing for the asynchronous proxy's writes completed through it (TMA landings).
// Thread t holds a clock: component t counts its releases (its accesses are stamped with it), and
// component u says up to which stamp actor u's accesses happen before t's next one. A
// synchronization object (a barrier phase) collects the clocks of the threads that release into
// it, and a thread that acquires it takes their element-wise maximum. PTX semantics (ISA, memory
// consistency model, "release and acquire patterns"): barrier.sync and barrier.arrive release;
// barrier.sync acquires when its phase completes (arrive does not wait, so it acquires nothing);
// __syncwarp does both among its lanes; mbarrier.arrive releases into the current phase, and a
// try_wait that observes a completed phase acquires it, together with the asynchronous writes
// whose complete_tx the phase counted.
//
// The cross-proxy check (fence.proxy.async between a generic-proxy write and an async-proxy read
// of the same bytes) rides on the same releases and acquires: each thread also holds the join of
// the clocks that the fence.proxy.async executions it is ordered after had when they ran (its
// `fenced` clock), and a synchronization object carries both. A write stamped s by thread w is
// fenced for a reader exactly when the reader's fenced clock has component w >= s: some fence ran
// after the write and before the read. No list of fences is kept, so none is ever forgotten.
//
// Header of the emulator only: standard headers, no project includes.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <vector>

namespace cpgen::emulation {

using VectorClock = std::vector<uint32_t>;

// What a synchronization object (a barrier phase, an mbarrier phase, a warp's __syncwarp) hands
// from the threads that release into it to those that acquire it.
struct SyncClock {
  VectorClock order;   // happens-before
  VectorClock fenced;  // the fences' clocks (above)
  void clear() {
    order.clear();
    fenced.clear();
  }
};

// into = max(into, from), element-wise; a missing component counts as 0.
inline void join(VectorClock& into, const VectorClock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] > into[i]) into[i] = from[i];
}

// Component `actor` of a clock, 0 when the clock is shorter.
inline uint32_t component(const VectorClock& clock, int actor) {
  return static_cast<size_t>(actor) < clock.size() ? clock[static_cast<size_t>(actor)] : 0;
}

class HappensBefore {
 public:
  void reset(int threads) {
    threads_ = threads;
    actors_ = threads;
    clocks_.resize(static_cast<size_t>(threads));
    fenced_.assign(static_cast<size_t>(threads), VectorClock{});
    for (int t = 0; t < threads; ++t) {
      VectorClock& c = clocks_[static_cast<size_t>(t)];
      c.assign(static_cast<size_t>(threads), 0);
      c[static_cast<size_t>(t)] = 1;  // stamps start at 1: a 0 in another clock is "nothing seen"
    }
  }

  // A new asynchronous actor (an mbarrier's landings); its stamps are 1 + the phase they landed in.
  int add_actor() { return actors_++; }
  bool is_thread(int actor) const { return actor >= 0 && actor < threads_; }

  // The stamp of `thread`'s accesses from now until its next release.
  uint32_t stamp(int thread) const { return clocks_[static_cast<size_t>(thread)][static_cast<size_t>(thread)]; }
  const VectorClock& view(int thread) const { return clocks_[static_cast<size_t>(thread)]; }
  // The join of the clocks of the fence.proxy.async executions ordered before `thread`'s next
  // access (its own included).
  const VectorClock& fenced_view(int thread) const { return fenced_[static_cast<size_t>(thread)]; }

  // `thread`'s accesses so far join `sync`; its later ones get a new stamp.
  void release(int thread, SyncClock& sync) {
    VectorClock& c = clocks_[static_cast<size_t>(thread)];
    join(sync.order, c);
    join(sync.fenced, fenced_[static_cast<size_t>(thread)]);
    ++c[static_cast<size_t>(thread)];
  }
  // A fence.proxy.async by `thread`: its accesses so far are fenced for whoever it is ordered
  // before; its later ones get a new stamp, so the fence tells those before it from those after.
  void fence(int thread) {
    VectorClock& c = clocks_[static_cast<size_t>(thread)];
    join(fenced_[static_cast<size_t>(thread)], c);
    ++c[static_cast<size_t>(thread)];
  }
  // Everything `sync` collected happens before `thread`'s next access.
  void acquire(int thread, const SyncClock& sync) {
    join(clocks_[static_cast<size_t>(thread)], sync.order);
    join(fenced_[static_cast<size_t>(thread)], sync.fenced);
  }

 private:
  int threads_ = 0;
  int actors_ = 0;
  std::vector<VectorClock> clocks_;
  std::vector<VectorClock> fenced_;
};

// Whether an access by `actor` stamped `stamp` happens before the access of the party whose clock
// is `view` (the same thread's earlier accesses always do). Given a fenced clock as `view`
// (HappensBefore::fenced_view): whether a fence.proxy.async ran after the access and before that
// party's.
inline bool happens_before(int actor, uint32_t stamp, const VectorClock& view) { return component(view, actor) >= stamp; }

}  // namespace cpgen::emulation
