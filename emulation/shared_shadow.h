// The sanitizer's view of one CTA's shared memory (emulation/cuda_emulation.cpp): per byte, whether
// it was written in this CTA, who last wrote it, and two of the threads that read it since (the
// latest, and an earlier one of another thread), each with its synchronization epoch. Two readers
// suffice for writes: a writer conflicts with some reader of its epoch whenever two distinct
// threads read there, and one of the two kept is not the writer. (A reader both kept readers'
// barriers have since ordered, while it is not, can still be missed: a warp-level case only.)
// Semantics (CUDA programming guide, memory consistency; PTX ISA, bar.sync and bar.warp.sync):
// shared memory written by one thread is visible to another only after a barrier both took part
// in, __syncthreads for the CTA or __syncwarp for two lanes of one warp. So two accesses to a byte
// by different threads, at least one a write, with no such barrier between them, are a race; and
// a read of a byte no thread of the CTA has written reads garbage (the CTA's shared memory starts
// undefined).
//
// Only accesses the emulator performs are seen: cp.async landings (writes, at wait_group) and
// ldmatrix (reads). Plain loads and stores of shared memory in kernel code are ordinary C++ and
// invisible here; so that stores made that way do not read as "never written", a read of an
// element that still holds the CTA's poison (all ones) and was never written through the emulator
// is what counts as uninitialized. Header of the emulator only: standard headers, no project includes.
#pragma once

#include <stdint.h>
#include <string.h>

#include <string>
#include <vector>

namespace cpgen::emulation {

// Where a thread stands in the CTA's synchronization: the count of CTA barriers opened, and of
// __syncwarp calls its warp completed.
struct SyncEpoch {
  uint32_t block = 0;
  uint32_t warp = 0;
};

class SharedShadow {
 public:
  static constexpr int16_t kNobody = -1;

  void reset(int bytes) {
    size_ = bytes;
    written_.assign(static_cast<size_t>(bytes), 0);
    writer_.assign(static_cast<size_t>(bytes), kNobody);
    reader_.assign(static_cast<size_t>(bytes), kNobody);
    earlier_reader_.assign(static_cast<size_t>(bytes), kNobody);
    write_epoch_.assign(static_cast<size_t>(bytes), SyncEpoch{});
    read_epoch_.assign(static_cast<size_t>(bytes), SyncEpoch{});
    earlier_read_epoch_.assign(static_cast<size_t>(bytes), SyncEpoch{});
  }
  int size() const { return size_; }

  // A write of [offset, offset + count) by `thread` at `now`. Returns the first conflicting
  // thread (another thread's read or write of one of the bytes with no barrier between), else
  // kNobody. `offset` must be in range.
  int write(uint32_t offset, int count, int thread, SyncEpoch now) {
    int conflict = kNobody;
    for (int i = 0; i < count; ++i) {
      const size_t b = offset + static_cast<size_t>(i);
      if (conflict == kNobody && unordered(writer_[b], write_epoch_[b], thread, now)) conflict = writer_[b];
      if (conflict == kNobody && unordered(reader_[b], read_epoch_[b], thread, now)) conflict = reader_[b];
      if (conflict == kNobody && unordered(earlier_reader_[b], earlier_read_epoch_[b], thread, now))
        conflict = earlier_reader_[b];
      written_[b] = 1;
      writer_[b] = static_cast<int16_t>(thread);
      write_epoch_[b] = now;
    }
    return conflict;
  }

  // An asynchronous-proxy write (a TMA copy landing when its mbarrier phase completes): the bytes
  // count as written and forget earlier accessors; its ordering with readers is the mbarrier's,
  // which the caller checks (emulation/hopper_emulation.inc), not a CTA barrier's.
  void land_async(uint32_t offset, int count) {
    for (int i = 0; i < count; ++i) {
      const size_t b = offset + static_cast<size_t>(i);
      written_[b] = 1;
      writer_[b] = kNobody;
      reader_[b] = kNobody;
      earlier_reader_[b] = kNobody;
    }
  }

  // A read of one element: the first conflicting writer, else kNobody; `never_written` tells
  // whether the element was never written through the emulator and still holds the poison in
  // every byte (an all-ones 16-bit element is a NaN that no kernel stores on purpose; a single
  // 0xFF byte is an ordinary part of many values).
  int read(uint32_t offset, int count, int thread, SyncEpoch now, const unsigned char* memory, bool* never_written) {
    int conflict = kNobody;
    bool poisoned = true;
    for (int i = 0; i < count; ++i) {
      const size_t b = offset + static_cast<size_t>(i);
      poisoned = poisoned && !written_[b] && memory[b] == 0xFF;
      if (conflict == kNobody && unordered(writer_[b], write_epoch_[b], thread, now)) conflict = writer_[b];
      // A new reader pushes the previous one into the earlier slot, unless a barrier since has
      // ordered it before every later access (then the earlier slot keeps what it held).
      if (reader_[b] != thread && reader_[b] != kNobody && read_epoch_[b].block == now.block) {
        earlier_reader_[b] = reader_[b];
        earlier_read_epoch_[b] = read_epoch_[b];
      }
      reader_[b] = static_cast<int16_t>(thread);
      read_epoch_[b] = now;
    }
    if (poisoned) *never_written = true;
    return conflict;
  }

 private:
  // Whether an access by `other` at `then` and one by `thread` at `now` have no barrier between
  // them: the same CTA barrier epoch, and not lanes of one warp with a __syncwarp between.
  static bool unordered(int16_t other, SyncEpoch then, int thread, SyncEpoch now) {
    if (other == kNobody || other == thread) return false;
    if (then.block != now.block) return false;
    if (other / 32 == thread / 32 && then.warp != now.warp) return false;
    return true;
  }

  int size_ = 0;
  std::vector<unsigned char> written_;
  std::vector<int16_t> writer_, reader_, earlier_reader_;
  std::vector<SyncEpoch> write_epoch_, read_epoch_, earlier_read_epoch_;
};

}  // namespace cpgen::emulation
