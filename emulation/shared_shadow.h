// The sanitizer's view of one CTA's shared memory (emulation/cuda_emulation.cpp): per byte,
// whether it was written in this CTA, its last write, and every thread's latest read of it since
// (reader_sets.h), each as an access: the actor (a thread, or an mbarrier's asynchronous writes,
// happens_before.h) and its stamp. A write is checked against all of those reads: a tile read by
// many warps and overwritten by a producer that waited for only some of them is a race whichever
// warp read last.
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

#include <algorithm>
#include <vector>

#include "happens_before.h"
#include "reader_sets.h"

namespace cpgen::emulation {

class SharedShadow {
 public:
  void reset(int bytes) {
    size_ = bytes;
    written_.assign(static_cast<size_t>(bytes), 0);
    generic_.assign(static_cast<size_t>(bytes), 0);
    writer_.assign(static_cast<size_t>(bytes), Access{});
    readers_.assign(static_cast<size_t>(bytes), ReaderSets::kEmpty);
    reader_sets_.clear();
    compact_at_ = kCompactEntries;
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
    uint32_t checked = ReaderSets::kEmpty;  // the bytes of one write mostly share their readers
    for (int i = 0; i < count; ++i) {
      const size_t b = offset + static_cast<size_t>(i);
      if (conflict.none() && unordered(writer_[b], view)) conflict = writer_[b];
      if (conflict.none() && readers_[b] != checked) {
        const std::vector<Access>& reads = reader_sets_.members(readers_[b]);
        for (auto r = reads.rbegin(); r != reads.rend() && conflict.none(); ++r)  // the latest first
          if (unordered(*r, view)) conflict = *r;
        checked = readers_[b];
      }
      written_[b] = 1;
      generic_[b] = generic ? 1 : 0;
      writer_[b] = {static_cast<int16_t>(actor), stamp};
      readers_[b] = ReaderSets::kEmpty;  // each happens before this write, or was reported
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
    if (reader_sets_.entries() > compact_at_) {
      reader_sets_.compact(readers_);
      compact_at_ = std::max(kCompactEntries, 2 * reader_sets_.entries());  // no compaction per read
    }
    const Access mine{static_cast<int16_t>(thread), stamp};
    for (int i = 0; i < count; ++i) {
      const size_t b = offset + static_cast<size_t>(i);
      poisoned = poisoned && !written_[b] && memory[b] == 0xFF;
      if (conflict.none() && unordered(writer_[b], view)) conflict = writer_[b];
      readers_[b] = reader_sets_.add(readers_[b], mine);
    }
    if (poisoned) *never_written = true;
    return conflict;
  }

 private:
  // Sets no byte names are dropped once this many entries are held (8 bytes each), or twice what
  // the last compaction kept.
  static constexpr size_t kCompactEntries = size_t{1} << 22;

  static bool unordered(const Access& a, const VectorClock& view) {
    return !a.none() && !happens_before(a.actor, a.stamp, view);
  }

  int size_ = 0;
  std::vector<unsigned char> written_, generic_;
  std::vector<Access> writer_;
  std::vector<uint32_t> readers_;  // per byte, its set in reader_sets_
  ReaderSets reader_sets_;
  size_t compact_at_ = kCompactEntries;
};

}  // namespace cpgen::emulation
