// The sanitizer's view of one CTA's shared memory (emulation/cuda_emulation.cpp): per byte,
// whether it was written in this CTA, its last write, and two of its reads since (the latest, and
// an earlier one that does not happen before it), each as an access: the actor (a thread, or an
// mbarrier's asynchronous writes, happens_before.h) and its stamp. A read that happens before a
// newer read can be forgotten: whatever the newer one happens before, the older does too, and
// what races with the older one while not with the newer is ordered after the newer and so
// after the older. Two slots keep that exact while at most two reads since the write are
// unordered with each other; a third such read forgets one (a race with it alone is then missed).
//
// Semantics (CUDA programming guide, memory consistency; PTX ISA, memory consistency model):
// shared memory written by one thread is visible to another only when the write happens before
// the read through synchronization (barriers, __syncwarp, mbarrier phases). So two accesses to a
// byte by different actors, at least one a write, neither happening before the other, are a
// race; and a read of a byte no thread of the CTA has written reads garbage (the CTA's shared
// memory starts undefined).
//
// Each byte also keeps whether its last write went through the generic proxy, for the check that
// such bytes reach the async proxy (wgmma operands) only past a fence.proxy.async
// (hopper_emulation.inc).
//
// Only accesses the emulator performs are seen: cp.async landings (writes, at wait_group), TMA
// landings (writes, when their mbarrier phase completes), ldmatrix and wgmma operands (reads).
// Plain loads and stores of shared memory in kernel code are ordinary C++ and invisible here; so
// that stores made that way do not read as "never written", a read of an element that still
// holds the CTA's poison (all ones) and was never written through the emulator is what counts as
// uninitialized. Header of the emulator only: standard headers, no project includes.
#pragma once

#include <stdint.h>
#include <string.h>

#include <vector>

#include "happens_before.h"

namespace cpgen::emulation {

// One access of a byte: who, and the stamp of their clock then.
struct Access {
  static constexpr int16_t kNobody = -1;
  int16_t actor = kNobody;
  uint32_t stamp = 0;
  bool none() const { return actor == kNobody; }
};

class SharedShadow {
 public:
  void reset(int bytes) {
    size_ = bytes;
    written_.assign(static_cast<size_t>(bytes), 0);
    generic_.assign(static_cast<size_t>(bytes), 0);
    writer_.assign(static_cast<size_t>(bytes), Access{});
    reader_.assign(static_cast<size_t>(bytes), Access{});
    earlier_reader_.assign(static_cast<size_t>(bytes), Access{});
  }
  int size() const { return size_; }

  // The last write of byte `offset` when it went through the generic proxy, else none.
  Access generic_writer(uint32_t offset) const {
    return generic_[offset] ? writer_[offset] : Access{};
  }

  // A write of [offset, offset + count) by `actor` stamped `stamp`, by a party whose clock is
  // `view` (for an asynchronous write, the clock of the thread that issued it, when it did);
  // `generic`: through the generic proxy (a thread's store, a cp.async landing), not the async
  // proxy (a TMA landing). Returns the first earlier access of one of the bytes that does not
  // happen before it (a race), else none. `offset` must be in range.
  Access write(uint32_t offset, int count, int actor, uint32_t stamp, const VectorClock& view, bool generic) {
    Access conflict;
    for (int i = 0; i < count; ++i) {
      const size_t b = offset + static_cast<size_t>(i);
      for (const Access* a : {&writer_[b], &reader_[b], &earlier_reader_[b]})
        if (conflict.none() && unordered(*a, view)) conflict = *a;
      written_[b] = 1;
      generic_[b] = generic ? 1 : 0;
      writer_[b] = {static_cast<int16_t>(actor), stamp};
      reader_[b] = earlier_reader_[b] = Access{};  // each happens before this write, or was reported
    }
    return conflict;
  }

  // A read of one element by `thread` (stamp, clock `view`): the first write that does not happen
  // before it, else none; `never_written` tells whether the element was never written through the
  // emulator and still holds the poison in every byte (an all-ones 16-bit element is a NaN that no
  // kernel stores on purpose; a single 0xFF byte is an ordinary part of many values).
  Access read(uint32_t offset, int count, int thread, uint32_t stamp, const VectorClock& view,
              const unsigned char* memory, bool* never_written) {
    Access conflict;
    bool poisoned = true;
    const Access mine{static_cast<int16_t>(thread), stamp};
    for (int i = 0; i < count; ++i) {
      const size_t b = offset + static_cast<size_t>(i);
      poisoned = poisoned && !written_[b] && memory[b] == 0xFF;
      if (conflict.none() && unordered(writer_[b], view)) conflict = writer_[b];
      Access& latest = reader_[b];
      Access& earlier = earlier_reader_[b];
      if (!latest.none() && !happens_before(latest.actor, latest.stamp, view) &&
          (earlier.none() || happens_before(earlier.actor, earlier.stamp, view)))
        earlier = latest;  // still unordered with this read: kept
      if (!earlier.none() && happens_before(earlier.actor, earlier.stamp, view)) earlier = Access{};
      latest = mine;
    }
    if (poisoned) *never_written = true;
    return conflict;
  }

 private:
  static bool unordered(const Access& a, const VectorClock& view) {
    return !a.none() && !happens_before(a.actor, a.stamp, view);
  }

  int size_ = 0;
  std::vector<unsigned char> written_, generic_;
  std::vector<Access> writer_, reader_, earlier_reader_;
};

}  // namespace cpgen::emulation
