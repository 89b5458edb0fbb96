// The emulator's TMA tiled load (cp.async.bulk.tensor ... .tile.mbarrier::complete_tx::bytes) and
// its tensor map (emulation/tensor_map.h), element by element against the documented semantics:
// the box at the coordinates, elements outside the tensor zero, laid out densely in shared memory
// with the map's swizzle (tests/emulation/hopper_test_util.h, swizzled), and the box's bytes
// completed on the mbarrier so that the phase completes when they and the arrivals are in.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hopper_test_util.h"

namespace cpgen {
namespace {

using emulation::TensorMap;

constexpr uint32_t kBar = 0;      // the mbarrier's shared address
constexpr uint32_t kTile = 1024;  // the box's shared address (1024: every swizzle's repeat)

// A 2-D tensor of 16-bit values: 40 columns (innermost) x 20 rows, rows 48 elements apart.
constexpr int kCols = 40, kRows = 20, kPitch = 48;
alignas(128) uint16_t g_tensor[kRows * kPitch];

uint16_t value_at(int row, int col) { return static_cast<uint16_t>(1 + row * 64 + col); }

void fill_tensor() {
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kPitch; ++c) g_tensor[r * kPitch + c] = c < kCols ? value_at(r, c) : 0xBEEF;
}

TensorMap map_2d(uint32_t box_cols, uint32_t box_rows, uint32_t swizzle) {
  TensorMap map;
  const uint64_t dims[2] = {kCols, kRows}, strides[1] = {kPitch * 2};
  const uint32_t box[2] = {box_cols, box_rows}, element_strides[2] = {1, 1};
  const std::string error = emulation::encode_tensor_map_tiled(
      &map, emulation::kTensorMapBfloat16, 2, g_tensor, dims, strides, box, element_strides,
      emulation::kTensorMapInterleaveNone, swizzle, 0, emulation::kTensorMapOobFillZero);
  EXPECT_EQ(error, "");
  return map;
}

// Loads one box at (c0, c1) with thread 0 (expect_tx of the box's bytes, then the copy), waits
// for the phase on every thread, and copies the shared box out.
std::vector<uint16_t> load_box(const TensorMap& map, int c0, int c1) {
  static const TensorMap* s_map;
  static int s_coords[2];
  static std::vector<uint16_t> s_out;
  s_map = &map;
  s_coords[0] = c0;
  s_coords[1] = c1;
  const uint32_t bytes = map.box[0] * map.box[1] * 2;
  s_out.assign(bytes / 2, 0xFFFF);
  testing::LaunchBuffers buffers({{g_tensor, sizeof g_tensor}});
  static uint32_t s_bytes;
  s_bytes = bytes;
  const std::string error = emulation::launch(1, 1, 32, static_cast<int>(kTile + bytes), [] {
    if (threadIdx.x == 0) {
      emulation::mbarrier_init(kBar, 1);
      emulation::fence_proxy_async();
      emulation::mbarrier_arrive_expect_tx(kBar, s_bytes);
      emulation::tma_load(kTile, s_map, s_coords, 2, kBar);
    }
    __syncthreads();
    emulation::mbarrier_wait_parity(kBar, 0);
    if (threadIdx.x == 0) memcpy(s_out.data(), cpgen::device::shared_storage + kTile, s_bytes);
  });
  EXPECT_EQ(error, "");
  return s_out;
}

void check_box(const std::vector<uint16_t>& got, uint32_t box_cols, uint32_t box_rows, uint32_t span, int c0, int c1) {
  for (uint32_t r = 0; r < box_rows; ++r)
    for (uint32_t c = 0; c < box_cols; ++c) {
      const int row = c1 + static_cast<int>(r), col = c0 + static_cast<int>(c);
      const bool inside = row >= 0 && row < kRows && col >= 0 && col < kCols;
      const uint16_t want = inside ? value_at(row, col) : 0;
      const uint32_t at = testing::swizzled((r * box_cols + c) * 2, span) / 2;
      ASSERT_EQ(got[at], want) << "box element (" << r << ", " << c << ") at tensor (" << row << ", " << col
                               << "), span " << span;
    }
}

TEST(Tma, BoxLandsSwizzledWithOutOfBoundsZeros) {
  fill_tensor();
  struct Case {
    uint32_t swizzle, span, box_cols;
  };
  // Each swizzle with a box row as wide as its span; no swizzle with 48-byte rows.
  for (const Case k :
       {Case{emulation::kTensorMapSwizzleNone, 0, 24}, Case{emulation::kTensorMapSwizzle32B, 32, 16},
        Case{emulation::kTensorMapSwizzle64B, 64, 32}, Case{emulation::kTensorMapSwizzle128B, 128, 64}}) {
    const TensorMap map = map_2d(k.box_cols, 16, k.swizzle);
    // Inside, over the right and bottom edges, and before the start (negative coordinates).
    for (const auto [c0, c1] : {std::pair{8, 2}, std::pair{30, 10}, std::pair{-5, -3}}) {
      SCOPED_TRACE("swizzle " + std::to_string(k.span) + " at (" + std::to_string(c0) + ", " + std::to_string(c1) +
                   ")");
      check_box(load_box(map, c0, c1), k.box_cols, 16, k.span, c0, c1);
    }
  }
}

// With a read counter on the buffer, a TMA load counts each 16-byte chunk its in-bounds bytes
// touch, once per box row; rows and columns outside the tensor read nothing (the chunks a test
// uses to prove that a kernel skipped a tile). A 2-D box of 16 columns x 8 rows at (32, 16): rows
// 16-19 are inside (20 rows), columns 32-39 inside (40 columns), so each of those 4 rows reads
// its one chunk of columns 32-39 (bytes 64-79 of the row); nothing else is counted.
TEST(Tma, LoadCountsTheChunksItReads) {
  fill_tensor();
  const TensorMap map = map_2d(16, 8, emulation::kTensorMapSwizzleNone);
  static const TensorMap* s_map;
  s_map = &map;
  std::vector<uint32_t> reads((sizeof g_tensor + 15) / 16, 0);
  testing::LaunchBuffers buffers({{g_tensor, sizeof g_tensor, reads.data()}});
  ASSERT_EQ(emulation::launch(1, 1, 32, 2048,
                              [] {
                                if (threadIdx.x == 0) {
                                  const int32_t coords[2] = {32, 16};
                                  emulation::mbarrier_init(kBar, 1);
                                  emulation::fence_proxy_async();
                                  emulation::mbarrier_arrive_expect_tx(kBar, 16 * 8 * 2);
                                  emulation::tma_load(kTile, s_map, coords, 2, kBar);
                                  emulation::mbarrier_wait_parity(kBar, 0);
                                }
                              }),
            "");
  for (size_t chunk = 0; chunk < reads.size(); ++chunk) {
    const size_t row = chunk * 16 / (kPitch * 2), byte_in_row = chunk * 16 % (kPitch * 2);
    const uint32_t want = row >= 16 && row < 20 && byte_in_row == 64 ? 1 : 0;
    EXPECT_EQ(reads[chunk], want) << "chunk " << chunk << " (row " << row << ", byte " << byte_in_row << ")";
  }
}

TEST(Tma, ThreeDimensionalBox) {
  // The 2-D tensor seen as 3-D: 40 columns, 5 rows, 4 planes of 5 rows (the same memory).
  fill_tensor();
  TensorMap map;
  const uint64_t dims[3] = {kCols, 5, 4}, strides[2] = {kPitch * 2, 5 * kPitch * 2};
  const uint32_t box[3] = {8, 4, 2}, ones[3] = {1, 1, 1};
  ASSERT_EQ(emulation::encode_tensor_map_tiled(&map, emulation::kTensorMapFloat16, 3, g_tensor, dims, strides, box,
                                               ones, 0, emulation::kTensorMapSwizzleNone, 0, 0),
            "");
  static const TensorMap* s_map;
  static std::vector<uint16_t> s_out;
  s_map = &map;
  s_out.assign(64, 0xFFFF);
  testing::LaunchBuffers buffers({{g_tensor, sizeof g_tensor}});
  ASSERT_EQ(emulation::launch(1, 1, 32, 2048,
                              [] {
                                if (threadIdx.x == 0) {
                                  const int32_t coords[3] = {36, 3, 2};  // columns 36-43, rows 3-6, planes 2-3
                                  emulation::mbarrier_init(kBar, 1);
                                  emulation::fence_proxy_async();
                                  emulation::mbarrier_arrive_expect_tx(kBar, 128);
                                  emulation::tma_load(kTile, s_map, coords, 3, kBar);
                                  emulation::mbarrier_wait_parity(kBar, 0);
                                  memcpy(s_out.data(), cpgen::device::shared_storage + kTile, 128);
                                }
                              }),
            "");
  for (int p = 0; p < 2; ++p)
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 8; ++c) {
        const int plane = 2 + p, row = 3 + r, col = 36 + c;
        const bool inside = plane < 4 && row < 5 && col < kCols;
        EXPECT_EQ(s_out[(p * 4 + r) * 8 + c], inside ? value_at(plane * 5 + row, col) : 0)
            << "plane " << plane << " row " << row << " col " << col;
      }
}

TEST(Tma, EncodeRejectsWhatTheDriverRejectsWithOneLine) {
  TensorMap map;
  const uint64_t dims[2] = {kCols, kRows}, strides[1] = {kPitch * 2}, bad_strides[1] = {90};
  const uint32_t box[2] = {64, 8}, wide_box[2] = {300, 8}, odd_box[2] = {12, 8}, ones[2] = {1, 1}, twos[2] = {1, 2};
  auto encode = [&](uint32_t type, uint32_t rank, const void* address, const uint64_t* st, const uint32_t* b,
                    const uint32_t* es, uint32_t swizzle, uint32_t fill) {
    return emulation::encode_tensor_map_tiled(&map, type, rank, address, dims, st, b, es, 0, swizzle, 0, fill);
  };
  EXPECT_EQ(encode(9, 2, g_tensor, strides, box, ones, 3, 0), "");
  EXPECT_EQ(map.magic, emulation::kTensorMapMagic);
  EXPECT_NE(encode(7, 2, g_tensor, strides, box, ones, 3, 0).find("16-bit types only"), std::string::npos);
  EXPECT_NE(encode(9, 6, g_tensor, strides, box, ones, 3, 0).find("rank 6: must be 1 to 5"), std::string::npos);
  EXPECT_NE(encode(9, 2, g_tensor + 1, strides, box, ones, 3, 0).find("16-byte aligned"), std::string::npos);
  EXPECT_NE(encode(9, 2, g_tensor, bad_strides, box, ones, 3, 0).find("globalStrides[0] = 90"), std::string::npos);
  EXPECT_NE(encode(9, 2, g_tensor, strides, odd_box, ones, 0, 0).find("24 bytes: must be a multiple of 16"),
            std::string::npos);
  EXPECT_NE(encode(9, 2, g_tensor, strides, box, ones, 2, 0).find("at most the 64-byte swizzle span"),
            std::string::npos);
  const uint32_t narrow[2] = {16, 8};  // 32-byte rows under the 128-byte swizzle: allowed by the driver, not modelled
  EXPECT_NE(encode(9, 2, g_tensor, strides, narrow, ones, 3, 0).find("rows of exactly the 128-byte span only"),
            std::string::npos);
  EXPECT_NE(encode(9, 2, g_tensor, strides, wide_box, ones, 0, 0).find("boxDim[0] = 300: must be 1 to 256"),
            std::string::npos);
  EXPECT_NE(encode(9, 2, g_tensor, strides, box, twos, 3, 0).find("elementStrides[1] = 2"), std::string::npos);
  EXPECT_NE(encode(9, 2, g_tensor, strides, box, ones, 3, 1).find("FILL_NONE"), std::string::npos);
}

}  // namespace
}  // namespace cpgen
