// Two tiny kernel bodies of the emulator's tests that write and read shared memory through the
// operations the sanitizer sees (cp.async lands as a write at wait_group, ldmatrix reads): rows
// 0-7 of 16 bytes at shared offset 0. Include after emulation/cuda_emulation.h.
#pragma once

#include <stdint.h>

namespace cpgen::testing {

// Threads first..first+7 each copy one 16-byte row of `source` into shared row t - first, then
// wait for it.
inline void copy_rows_in(const unsigned char* source, unsigned first = 0) {
  const unsigned t = threadIdx.x - first;
  if (threadIdx.x >= first && t < 8) {
    emulation::cp_async_16(16 * t, source + 16 * t, true);
    emulation::cp_async_commit();
    emulation::cp_async_wait(0);
  }
}

// Every warp loads the 8x8 matrix of rows 0-7 (all four matrices the same).
inline void load_rows() {
  uint32_t r[4];
  emulation::ldmatrix_x4(r, 16 * (threadIdx.x % 8), false);
}

}  // namespace cpgen::testing
