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
// Header of the emulator only: standard headers, no project includes.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <vector>

namespace cpgen::emulation {

using VectorClock = std::vector<uint32_t>;

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

  // `thread`'s accesses so far join `sync`; its later ones get a new stamp.
  void release(int thread, VectorClock& sync) {
    VectorClock& c = clocks_[static_cast<size_t>(thread)];
    join(sync, c);
    ++c[static_cast<size_t>(thread)];
  }
  // `thread`'s later accesses get a new stamp, with no release: an event between them (a proxy
  // fence) can then tell the accesses before it from those after.
  void tick(int thread) { ++clocks_[static_cast<size_t>(thread)][static_cast<size_t>(thread)]; }
  // Everything `sync` collected happens before `thread`'s next access.
  void acquire(int thread, const VectorClock& sync) { join(clocks_[static_cast<size_t>(thread)], sync); }

 private:
  int threads_ = 0;
  int actors_ = 0;
  std::vector<VectorClock> clocks_;
};

// Whether an access by `actor` stamped `stamp` happens before the access of the party whose clock
// is `view` (the same thread's earlier accesses always do).
inline bool happens_before(int actor, uint32_t stamp, const VectorClock& view) { return component(view, actor) >= stamp; }

}  // namespace cpgen::emulation
