// templates/hopper.cuh's wrappers run by the CPU emulator: the descriptor helper against the
// emulator's decoder of the ISA's format, a two-warp producer/consumer ring of TMA loads over
// mbarriers, and a warp-specialized tile product (a producer warpgroup loading 128-byte-swizzled
// tiles with TMA, a consumer warpgroup multiplying them with wgmma, stepping K inside the swizzle
// atom) against float64. The wrappers compile for the GPU in HopperCompile.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "emulation/hopper_test_util.h"

// Last: the emulator defines __CUDACC__ and the CUDA keywords for the template header.
#include "emulation/cuda_emulation.h"
#include "cpgen/hopper.cuh"

namespace cpgen {
namespace {

using device::u32;
using device::u64;
using device::wgmma_descriptor;

// Advancing a descriptor by a byte offset is the descriptor of the advanced address, for every
// address a CTA's shared memory can have (the kernels advance one descriptor per k-step), with the
// other fields untouched; a start field at its 14-bit top would carry into the LBO, which is why
// the helper is only for addresses below 2^18.
TEST(HopperTemplates, DescriptorAdvanceIsTheDescriptorOfTheAdvancedAddress) {
  using device::wgmma_descriptor_advance;
  for (const u32 swizzle : {device::kWgmmaSwizzleNone, device::kWgmmaSwizzle128B, device::kWgmmaSwizzle64B})
    for (const u32 start : {0u, 0x400u, 0x1230u, 0x20000u, 0x37C00u})
      for (const u32 bytes : {0u, 16u, 32u, 96u, 0x400u, 0x4000u, 0x8060u})
        for (const u32 lbo : {16u, 0x2000u, 0x3FFF0u}) {
          if (start + bytes >= 0x40000u) continue;
          const u64 d = wgmma_descriptor(start, lbo, 1024, swizzle);
          EXPECT_EQ(wgmma_descriptor_advance(d, bytes), wgmma_descriptor(start + bytes, lbo, 1024, swizzle))
              << std::hex << start << " + " << bytes << " lbo " << lbo;
        }
  static_assert(wgmma_descriptor_advance(wgmma_descriptor(0x400, 16, 1024, device::kWgmmaSwizzle128B), 0x20) ==
                    wgmma_descriptor(0x420, 16, 1024, device::kWgmmaSwizzle128B),
                "usable in constant expressions");
}

TEST(HopperTemplates, DescriptorHelperMatchesTheIsaFormat) {
  // Bits 0-13 start >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, 49-51 base offset, 62-63 swizzle.
  EXPECT_EQ(wgmma_descriptor(0x400, 16, 1024, device::kWgmmaSwizzle128B), 0x4000004000010040ull);
  EXPECT_EQ(wgmma_descriptor(0x3FFF0, 0x3FFF0, 0x3FFF0, device::kWgmmaSwizzle32B, 7), 0xC00E3FFF3FFF3FFFull);
  static_assert(wgmma_descriptor(256, 128, 256, device::kWgmmaSwizzleNone) == 0x0000001000080010ull,
                "usable in constant expressions");
  // Round trips through the emulator's decoder, with the address bits above 18 dropped by the
  // encoding ((x & 0x3FFFF) >> 4).
  for (const u32 swizzle :
       {device::kWgmmaSwizzleNone, device::kWgmmaSwizzle128B, device::kWgmmaSwizzle64B, device::kWgmmaSwizzle32B})
    for (const u32 start : {0u, 0x30u, 0x1230u, 0x3FFF0u, 0x41230u}) {
      const emulation::WgmmaDescriptor d =
          emulation::wgmma_descriptor_decode(wgmma_descriptor(start, 0x2340, 0x1000, swizzle, swizzle));
      EXPECT_EQ(d.start, start & 0x3FFF0u);
      EXPECT_EQ(d.leading_byte_offset, 0x2340u);
      EXPECT_EQ(d.stride_byte_offset, 0x1000u);
      EXPECT_EQ(d.base_offset, swizzle);
      EXPECT_EQ(d.swizzle, swizzle);
    }
}

// ---- producer / consumer over a ring of stages ----

constexpr int kTiles = 7, kStages = 3;
alignas(128) uint16_t g_rows[8 * 8 * kTiles];  // 8 columns x 56 rows; tile i is rows 8i..8i+7
device::TmaMap g_rows_map;
uint32_t g_seen[kTiles][32];
uint32_t g_sums[kTiles];

void producer_consumer() {
  using namespace device;
  const u32 base = shared_address(shared_storage);
  auto full = [base](int s) { return base + 8 * s; };
  auto empty = [base](int s) { return base + 64 + 8 * s; };
  auto stage = [base](int s) { return base + 1024 + 128 * s; };
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full(s), 1);
      mbarrier_init(empty(s), 32);
    }
    fence_proxy_async();  // the async proxy (TMA's complete_tx) sees the initialized barriers
  }
  __syncthreads();
  if (t < 32) {
    if (t != 0) return;
    for (int i = 0; i < kTiles; ++i) {
      const int s = i % kStages, round = i / kStages;
      if (round > 0) mbarrier_wait_parity(empty(s), (round - 1) & 1);  // the consumers freed it
      mbarrier_arrive_expect_tx(full(s), 128);
      const int coords[2] = {0, 8 * i};
      tma_load<2>(stage(s), g_rows_map, coords, full(s));
    }
  } else {
    const int lane = t - 32;
    for (int i = 0; i < kTiles; ++i) {
      const int s = i % kStages;
      mbarrier_wait_parity(full(s), (i / kStages) & 1);
      u32 r[4];
      ldmatrix_x4(r, stage(s) + 16 * (lane % 8));
      g_seen[i][lane] = r[0];
      if (lane == 0) {
        uint32_t sum = 0;
        for (int e = 0; e < 64; ++e) sum += reinterpret_cast<const uint16_t*>(shared_storage + (stage(s) - base))[e];
        g_sums[i] = sum;
      }
      mbarrier_arrive(empty(s));
    }
  }
}

TEST(HopperTemplates, ProducerWarpFeedsConsumerWarpThroughStages) {
  for (int i = 0; i < 8 * 8 * kTiles; ++i) g_rows[i] = static_cast<uint16_t>(3 * i + 1);
  const uint64_t dims[2] = {8, 8 * kTiles}, strides[1] = {16};
  const uint32_t box[2] = {8, 8}, ones[2] = {1, 1};
  ASSERT_EQ(emulation::encode_tensor_map_tiled(reinterpret_cast<emulation::TensorMap*>(&g_rows_map),
                                               emulation::kTensorMapBfloat16, 2, g_rows, dims, strides, box, ones, 0,
                                               emulation::kTensorMapSwizzleNone, 0, 0),
            "");
  testing::LaunchBuffers buffers({{g_rows, sizeof g_rows}});
  // Two CTAs one after another: each starts with fresh barriers (no state carries over).
  ASSERT_EQ(emulation::launch(2, 1, 64, 1024 + 128 * kStages, producer_consumer), "");
  for (int i = 0; i < kTiles; ++i) {
    uint32_t sum = 0;
    for (int e = 0; e < 64; ++e) sum += g_rows[64 * i + e];
    EXPECT_EQ(g_sums[i], sum) << "tile " << i;
    for (int lane = 0; lane < 32; ++lane) {
      // ldmatrix register 0: elements 2(l%4), 2(l%4)+1 of row l/4 of the tile.
      const int row = lane / 4, col = 2 * (lane % 4);
      const uint32_t want = g_rows[64 * i + 8 * row + col] | static_cast<uint32_t>(g_rows[64 * i + 8 * row + col + 1])
                                                                 << 16;
      EXPECT_EQ(g_seen[i][lane], want) << "tile " << i << " lane " << lane;
    }
  }
}

// ---- a warp-specialized tile product ----

// A (64 x 64) and B (64 x 64, one row per column n of D), both K contiguous, bf16.
alignas(128) uint16_t g_a[64 * 64], g_b[64 * 64];
device::TmaMap g_a_map, g_b_map;
float g_d[64][64];

void tile_product() {
  using namespace device;
  const u32 base = shared_address(shared_storage), full = base, a_tile = base + 1024, b_tile = base + 1024 + 8192;
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) {
    mbarrier_init(full, 1);
    fence_proxy_async();
  }
  __syncthreads();
  if (t < 128) {
    setmaxnreg_dec<40>();
    if (t == 0) {
      const int origin[2] = {0, 0};
      mbarrier_arrive_expect_tx(full, 2 * 8192);
      tma_load<2>(a_tile, g_a_map, origin, full);
      tma_load<2>(b_tile, g_b_map, origin, full);
    }
    return;
  }
  setmaxnreg_inc<232>();
  mbarrier_wait_parity(full, 0);
  float d[32];
  wgmma_fence();
  // K-major, 128-byte swizzle: rows of 64 elements are 128-byte lines, 8 rows an atom, atoms
  // 1024 bytes apart (SBO); the k-th block of 16 elements starts 32 bytes into the row.
  for (int kk = 0; kk < 4; ++kk)
    wgmma_ss<Bf16, 64>(d, wgmma_descriptor(a_tile + 32 * kk, 16, 1024, kWgmmaSwizzle128B),
                       wgmma_descriptor(b_tile + 32 * kk, 16, 1024, kWgmmaSwizzle128B), kk > 0);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operand(d);
  fence_proxy_async();
  for (int i = 0; i < 32; ++i) {
    const testing::Element e = testing::accumulator_element(t - 128, i);
    g_d[e.row][e.column] = d[i];
  }
}

TEST(HopperTemplates, ProducerWarpgroupFeedsWgmmaConsumer) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (uint16_t& x : g_a) x = emulation::float_to_16(uniform(rng), true);
  for (uint16_t& x : g_b) x = emulation::float_to_16(uniform(rng), true);
  const uint64_t dims[2] = {64, 64}, strides[1] = {128};
  const uint32_t box[2] = {64, 64}, ones[2] = {1, 1};
  for (auto [map, data] : {std::pair{&g_a_map, g_a}, std::pair{&g_b_map, g_b}})
    ASSERT_EQ(emulation::encode_tensor_map_tiled(reinterpret_cast<emulation::TensorMap*>(map),
                                                 emulation::kTensorMapBfloat16, 2, data, dims, strides, box, ones, 0,
                                                 emulation::kTensorMapSwizzle128B, 0, 0),
              "");
  testing::LaunchBuffers buffers({{g_a, sizeof g_a}, {g_b, sizeof g_b}});
  ASSERT_EQ(emulation::launch(1, 1, 256, 1024 + 2 * 8192, tile_product), "");
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 64; ++n) {
      double sum = 0, magnitude = 0;
      for (int k = 0; k < 64; ++k) {
        const double p = static_cast<double>(emulation::float_from_16(g_a[64 * m + k], true)) *
                         emulation::float_from_16(g_b[64 * n + k], true);
        sum += p;
        magnitude += std::fabs(p);
      }
      ASSERT_NEAR(g_d[m][n], sum, 1e-6 * magnitude + 1e-6) << "D(" << m << ", " << n << ")";
    }
}

}  // namespace
}  // namespace cpgen
