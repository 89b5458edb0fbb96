// wgmma over K slices of one wide 128-byte-swizzled tile, the way a kernel walks the head dim:
// the tile (64 K columns, 128 bytes a row) is laid out once, and each k16 slice is addressed only by
// moving the descriptors' start 32 bytes on, inside the swizzle atom. The PTX ISA applies the
// swizzle to the address bits, so a start off the 1024-byte pattern boundary still finds the
// slice's elements; its leading byte offset is not used by K-major swizzled layouts ("assumed to
// be 1"), so a nonsense value must change nothing. Two commit groups show wgmma.wait_group N: it
// retires the older group and leaves the newest N pending.
#include <gtest/gtest.h>

#include <stdint.h>

#include <string>
#include <vector>

#include "hopper_test_util.h"

namespace cpgen {
namespace {

constexpr int kN = 8, kK = 64;                 // B: 8 rows of N; 64 K columns (4 slices of 16)
constexpr uint32_t kRowBytes = 128;            // one row of the tile: 64 bf16, the swizzle span
constexpr uint32_t kBStart = 64 * kRowBytes;   // A: 64 rows at 0; B after it (1024-aligned)
constexpr uint32_t kSharedBytes = kBStart + kN * kRowBytes;
constexpr uint32_t kNonsenseLbo = 0x3FF0;      // ignored for K-major swizzled operands

// Small integers: every product and sum is exact in fp32.
float a_value(int row, int k) { return static_cast<float>((row * 7 + k * 3) % 9 - 4); }
float b_value(int column, int k) { return static_cast<float>((column * 5 + k) % 7 - 3); }

// The tile's image: element (row, k) of a K-major 128-byte-swizzled tile starting at `start` (a
// multiple of 1024) is at start + 1024 (row / 8) + swizzled(128 (row % 8) + 2k).
std::vector<uint16_t> image() {
  std::vector<uint16_t> bytes(kSharedBytes / 2, 0);
  for (int r = 0; r < 64; ++r)
    for (int k = 0; k < kK; ++k) {
      const uint32_t at = 1024 * (r / 8) + testing::swizzled(kRowBytes * (r % 8) + 2 * k, kRowBytes);
      bytes[at / 2] = emulation::float_to_16(a_value(r, k), true);
    }
  for (int c = 0; c < kN; ++c)
    for (int k = 0; k < kK; ++k)
      bytes[(kBStart + testing::swizzled(kRowBytes * c + 2 * k, kRowBytes)) / 2] =
          emulation::float_to_16(b_value(c, k), true);
  return bytes;
}

// K slice `s` (columns 16s .. 16s + 15) of an operand starting at `start`: the start moves 32
// bytes a slice; SBO 1024 (8 rows of 128 bytes); 128-byte swizzle.
uint64_t slice_descriptor(uint32_t start, int s) {
  return testing::isa_descriptor(start + 32 * static_cast<uint32_t>(s), kNonsenseLbo, 1024,
                                 emulation::kWgmmaSwizzle128B);
}

struct Seen {
  float first[128][4], second_early[128][4], second[128][4];
};
std::vector<uint16_t> g_image;
Seen g_seen;

// Thread 0 lays the tile image into shared memory for the CTA.
void load_image() {
  if (threadIdx.x == 0) memcpy(device::shared_storage, g_image.data(), g_image.size() * 2);
  __syncthreads();
}

// Issues slices `first` and first + 1 into d (the first overwriting unless `accumulate`) and
// commits them as one group.
void slice_group(float (&d)[4], int first, bool accumulate) {
  for (int s = first; s < first + 2; ++s)
    emulation::wgmma_mma_async_ss(d, kN, true, slice_descriptor(0, s), slice_descriptor(kBStart, s),
                                  accumulate || s > first, 1, 1, false, false);
  emulation::wgmma_commit_group();
}

// "thread t D(row, column)", for a failure's message.
std::string element_text(int t, const testing::Element& e) {
  return "thread " + std::to_string(t) + " D(" + std::to_string(e.row) + ", " + std::to_string(e.column) + ")";
}

// Group 1: slices 0 and 1 into `first`; group 2: slices 2 and 3 into `second`.
void two_groups() {
  const int t = static_cast<int>(threadIdx.x);
  load_image();
  float first[4] = {}, second[4] = {};
  emulation::wgmma_fence();
  slice_group(first, 0, false);
  slice_group(second, 2, false);
  emulation::wgmma_wait_group(1);
  for (int i = 0; i < 4; ++i) {
    g_seen.first[t][i] = first[i];
    g_seen.second_early[t][i] = second[i];
  }
  emulation::wgmma_wait_group(0);
  for (int i = 0; i < 4; ++i) g_seen.second[t][i] = second[i];
}

TEST(WgmmaSlices, StartsInsideTheSwizzleAtomReadEachSliceAndWaitGroupOneRetiresTheOlderGroup) {
  g_image = image();
  ASSERT_EQ(emulation::launch(1, 1, 128, static_cast<int>(kSharedBytes), two_groups), "");
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 4; ++i) {
      const testing::Element e = testing::accumulator_element(t, i);
      float low = 0.0f, high = 0.0f;
      for (int k = 0; k < 32; ++k) low += a_value(e.row, k) * b_value(e.column, k);
      for (int k = 32; k < 64; ++k) high += a_value(e.row, k) * b_value(e.column, k);
      const std::string at = element_text(t, e);
      ASSERT_EQ(g_seen.first[t][i], low) << at << ": slices 0 and 1, retired by wait_group(1)";
      ASSERT_TRUE(testing::is_signaling_nan(g_seen.second_early[t][i]))
          << at << ": the newest group is still pending after wait_group(1), its registers undefined";
      ASSERT_EQ(g_seen.second[t][i], high) << at << ": slices 2 and 3, retired by wait_group(0)";
    }
}

// One accumulator over both groups (slices 0, 1, then 2, 3, all adding to it): the older group's
// retirement leaves the registers undefined, as the newer group still writes them, and the last
// wait gives the whole sum, starting from the registers' value at the first issue.
struct Chained {
  float between[128][4], after[128][4];
};
Chained g_chained;

void two_groups_one_accumulator() {
  const int t = static_cast<int>(threadIdx.x);
  load_image();
  float acc[4] = {1, 1, 1, 1};
  emulation::wgmma_fence();
  slice_group(acc, 0, true);
  slice_group(acc, 2, true);
  emulation::wgmma_wait_group(1);
  for (int i = 0; i < 4; ++i) g_chained.between[t][i] = acc[i];
  emulation::wgmma_wait_group(0);
  for (int i = 0; i < 4; ++i) g_chained.after[t][i] = acc[i];
}

TEST(WgmmaSlices, GroupsOnOneAccumulatorChainAndItStaysUndefinedUntilTheLastRetires) {
  g_image = image();
  ASSERT_EQ(emulation::launch(1, 1, 128, static_cast<int>(kSharedBytes), two_groups_one_accumulator), "");
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 4; ++i) {
      const testing::Element e = testing::accumulator_element(t, i);
      float sum = 1.0f;
      for (int k = 0; k < kK; ++k) sum += a_value(e.row, k) * b_value(e.column, k);
      const std::string at = element_text(t, e);
      ASSERT_TRUE(testing::is_signaling_nan(g_chained.between[t][i])) << at << ": the newer group still adds to it";
      ASSERT_EQ(g_chained.after[t][i], sum) << at << ": 1 + all four slices";
    }
}

}  // namespace
}  // namespace cpgen
