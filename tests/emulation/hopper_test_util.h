// Helpers of the tests of the emulator's Hopper primitives (emulation/hopper_emulation.h): the
// reference layouts written from the PTX ISA and the CUDA driver documentation, independently of
// the emulator's own code (the launch's buffers and finding checks are in finding_test_util.h).
#pragma once

#include <gtest/gtest.h>

#include <stdint.h>
#include <string.h>

#include <string>
#include <vector>

#include "emulation/cuda_emulation.h"
#include "finding_test_util.h"

namespace cpgen::testing {

// A wgmma matrix descriptor as the ISA's "Matrix Descriptor Format" lays it out, written here
// apart from the templates' and the emulator's: (x & 0x3FFFF) >> 4 of the start address, LBO and
// SBO in bits 0, 16 and 32, the base offset in bits 49-51, the swizzle mode in bits 62-63.
inline uint64_t isa_descriptor(uint32_t start, uint32_t lbo, uint32_t sbo, uint32_t swizzle,
                               uint32_t base_offset = 0) {
  auto encode = [](uint32_t x) { return static_cast<uint64_t>((x & 0x3FFFFu) >> 4); };
  return encode(start) | encode(lbo) << 16 | encode(sbo) << 32 | static_cast<uint64_t>(base_offset & 7u) << 49 |
         static_cast<uint64_t>(swizzle) << 62;
}

// Issues and commits one m64n8k16 bf16 wgmma of the calling warpgroup (a wgmma.fence first when
// `fence`) over K-major unswizzled operands: A (64 x 16) at shared byte 0 (leading byte offset
// 128, stride 256), B (8 x 16) at 2048; `base_offset` goes in both descriptors. The sanitizer
// tests' smallest wgmma: its operands lie in the first 4096 shared bytes.
inline void issue_small_wgmma(float (&d)[4], bool fence = true, uint32_t base_offset = 0) {
  const uint64_t a = isa_descriptor(0, 128, 256, emulation::kWgmmaSwizzleNone, base_offset);
  const uint64_t b = isa_descriptor(2048, 128, 256, emulation::kWgmmaSwizzleNone, base_offset);
  if (fence) emulation::wgmma_fence();
  emulation::wgmma_mma_async_ss(d, 8, true, a, b, false, 1, 1, false, false);
  emulation::wgmma_commit_group();
}

// Fills `tile` (an 8 x 8 bf16 tensor: rows of 16 bytes, as ldmatrix reads them) with distinct
// values and encodes `map` to load the tensor at `address` whole as one box (128 bytes, no
// swizzle).
inline void encode_tile_map(emulation::TensorMap& map, uint16_t (&tile)[64], const void* address) {
  for (int i = 0; i < 64; ++i) tile[i] = static_cast<uint16_t>(0x3f80 + i);
  const uint64_t dims[2] = {8, 8}, strides[1] = {16};
  const uint32_t box[2] = {8, 8}, ones[2] = {1, 1};
  ASSERT_EQ(emulation::encode_tensor_map_tiled(&map, emulation::kTensorMapBfloat16, 2, address, dims, strides, box,
                                               ones, 0, 0, 0, 0),
            "");
}

// The shared byte a swizzled layout puts byte `offset` of a dense pattern at, for a pattern that
// starts at a multiple of its repeat (8 lines of 128 bytes): the pattern is cut into 128-byte
// lines and each line into 16-byte chunks; with a span of 32, 64 or 128 bytes, chunk c of line L
// moves to chunk c XOR (L mod span/16). (CUDA's TMA swizzle modes and the wgmma 32/64/128-byte
// swizzled layouts; 0: no swizzle.)
inline uint32_t swizzled(uint32_t offset, uint32_t span) {
  if (span == 0) return offset;
  const uint32_t line = offset / 128, chunk = offset % 128 / 16, byte = offset % 16;
  const uint32_t moved = chunk ^ (line % (span / 16));
  return line * 128 + moved * 16 + byte;
}

// Whether x is a signaling NaN (IEEE 754 binary32: exponent all ones, quiet bit 22 clear, a
// nonzero payload): what the emulator leaves in a wgmma's accumulator registers from its issue to
// the wait that retires it, where the ISA leaves them undefined.
inline bool is_signaling_nan(float x) {
  uint32_t bits;
  memcpy(&bits, &x, 4);
  return (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x00400000u) == 0 && (bits & 0x003fffffu) != 0;
}

// Which element of D (m64nNk16, f32) register i of warpgroup thread `thread` holds, per the ISA's
// figure: warp w has rows 16w..16w+15; in each 8-column block j = i / 4 the lane holds two
// neighbouring columns of row g (registers 4j, 4j+1) and of row g + 8 (4j+2, 4j+3).
struct Element {
  int row, column;
};
inline Element accumulator_element(int thread, int i) {
  const int warp = thread / 32, lane = thread % 32;
  return {16 * warp + lane / 4 + 8 * (i % 4 / 2), 8 * (i / 4) + 2 * (lane % 4) + i % 2};
}

}  // namespace cpgen::testing
