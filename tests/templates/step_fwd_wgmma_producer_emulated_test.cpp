// The load side of the sm_90a forward step kernel (templates/step_fwd_wgmma.cuh) run by the CPU
// emulator against a scripted consumer warpgroup: the kernel's own barrier setup and producer,
// real TMA loads from tensor maps built from the template's map descriptions. The script holds
// back every V release until the K two tiles on has landed, which is how long a consumer keeps
// V_t (until P_t V_t retires, after S_(t+1) was issued). A producer that reused a stage for K only
// after both K and V of the tile before were released (one empty barrier per stage, as the kernel
// had until 2026-11-26) could never deliver that K: the launch would end in the emulator's
// deadlock report.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "emulation/finding_test_util.h"
#include "emulation/tensor_map.h"

// Last: the emulator defines __CUDACC__ and the CUDA keywords for the template header.
#include "emulation/cuda_emulation.h"
#include "cpgen/step_fwd_wgmma.cuh"

namespace cpgen {
namespace {

using device::u32;
// Head dim 64 (one 128-byte column block per row), 64 x 64 tiles, one consumer warpgroup, two
// stages: the smallest configuration whose stage ring wraps.
using Traits = device::WgmmaFwdTraits<device::Bf16, 64, 64, 64, 1, 2, false, 1>;
constexpr int kKeys = 5 * 64 - 16;  // five tiles, the last one partial
constexpr int kTiles = (kKeys + Traits::kBlockN - 1) / Traits::kBlockN;
constexpr int kDim = Traits::kHeadDim;

// Every element of key row j of K is k_bits(j), of V v_bits(j): a swizzle only moves 16-byte
// chunks inside a row, so row r of a landed tile must read its key's bits wherever it looks.
uint16_t k_bits(int key) { return static_cast<uint16_t>(0x3000 + key); }
uint16_t v_bits(int key) { return static_cast<uint16_t>(0x5000 + key); }

alignas(128) uint16_t g_q[64 * kDim], g_k[kKeys * kDim], g_v[kKeys * kDim];
RingFwdWgmmaParams g_params;
// What the script saw: per tile, the rows of K and V that held other bits than their keys'.
int g_k_bad[kTiles], g_v_bad[kTiles];

// Rows of the landed tile at `tile` (keys from key0) whose bits differ from bits(key); rows past
// kKeys must be the TMA's zero fill.
int bad_rows(const unsigned char* tile, int key0, uint16_t (*bits)(int)) {
  int bad = 0;
  for (int r = 0; r < Traits::kBlockN; ++r) {
    const uint16_t want = key0 + r < kKeys ? bits(key0 + r) : 0;
    const auto* row = reinterpret_cast<const uint16_t*>(tile + r * Traits::kSwizzleBytes);
    for (int e = 0; e < kDim; ++e) {
      if (row[e] != want) {
        ++bad;
        break;
      }
    }
  }
  return bad;
}

void producer_and_scripted_consumer() {
  using namespace device;
  const WgmmaFwdShared<Traits> smem{(shared_address(shared_storage) + 1023u) & ~1023u};
  const unsigned char* base = shared_storage + (smem.base - shared_address(shared_storage));
  if (threadIdx.x == 0) wgmma_fwd_init_barriers<Traits>(smem);
  __syncthreads();
  if (threadIdx.x < 128) {
    if (threadIdx.x == 0) {
      WgmmaFwdItem item{};
      item.tiles = {0, 0, kTiles, kTiles};
      wgmma_fwd_produce<Traits>(g_params, smem, item);
    }
    return;
  }
  const bool reporter = threadIdx.x == 128;
  auto stage_of = [](int t) { return t % Traits::kStages; };
  auto parity_of = [](int t) { return (t / Traits::kStages) & 1; };
  // V_t is taken and released only after K_(t+2) has landed (a consumer's V_t outlives the
  // issue of S_(t+1), and the producer must run a stage ahead of that).
  auto take_v = [&](int t) {
    mbarrier_wait_parity(smem.v_full(stage_of(t)), parity_of(t));
    if (reporter) g_v_bad[t] = bad_rows(base + (smem.v_tile(stage_of(t)) - smem.base), t * Traits::kBlockN, v_bits);
    mbarrier_arrive(smem.v_empty(stage_of(t)));
  };
  mbarrier_wait_parity(smem.q_full(), 0);
  for (int t = 0; t < kTiles; ++t) {
    mbarrier_wait_parity(smem.k_full(stage_of(t)), parity_of(t));
    if (reporter) g_k_bad[t] = bad_rows(base + (smem.k_tile(stage_of(t)) - smem.base), t * Traits::kBlockN, k_bits);
    mbarrier_arrive(smem.k_empty(stage_of(t)));
    if (t >= Traits::kStages) take_v(t - Traits::kStages);  // V_(t-2) was held until K_t landed
  }
  for (int t = kTiles - Traits::kStages; t < kTiles; ++t) take_v(t);
}

TEST(StepFwdWgmmaProducer, KeyTilesRunAStageAheadOfTheValueReleases) {
  for (int j = 0; j < kKeys; ++j)
    for (int e = 0; e < kDim; ++e) {
      g_k[j * kDim + e] = k_bits(j);
      g_v[j * kDim + e] = v_bits(j);
    }
  for (uint16_t& x : g_q) x = 0x3f80;
  RingFwdParams& p = g_params.base;
  p = RingFwdParams{};
  p.q = g_q;
  p.k = g_k;
  p.v = g_v;
  p.batch = 1;
  p.q_heads = p.kv_heads = 1;
  p.q_len = 64;
  p.kv_len = kKeys;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = kDim;
  p.q_head_stride = 64 * kDim;
  p.k_head_stride = p.v_head_stride = kKeys * kDim;
  p.q_batch_stride = p.q_head_stride;
  p.k_batch_stride = p.v_batch_stride = p.k_head_stride;
  const uint32_t ones[5] = {1, 1, 1, 1, 1};
  auto encode = [&](const TmaMapDescription& d, device::TmaMap* map) {
    return emulation::encode_tensor_map_tiled(reinterpret_cast<emulation::TensorMap*>(map), d.data_type, d.rank,
                                              d.global, d.dims, d.strides, d.box, ones, 0, d.swizzle, 0, 0);
  };
  ASSERT_EQ(encode(device::q_map_description(p, true, kDim, 1, Traits::kBlockM), &g_params.q_map), "");
  ASSERT_EQ(encode(device::kv_map_description(p, false, true, kDim, Traits::kBlockN), &g_params.k_map), "");
  ASSERT_EQ(encode(device::kv_map_description(p, true, true, kDim, Traits::kBlockN), &g_params.v_map), "");
  for (int t = 0; t < kTiles; ++t) g_k_bad[t] = g_v_bad[t] = -1;

  testing::LaunchBuffers buffers({{g_q, sizeof g_q}, {g_k, sizeof g_k}, {g_v, sizeof g_v}});
  ASSERT_EQ(emulation::launch(1, 1, 256, Traits::kSharedBytes, producer_and_scripted_consumer), "");
  for (int t = 0; t < kTiles; ++t) {
    EXPECT_EQ(g_k_bad[t], 0) << "K tile " << t << ": rows with other bits (-1: never landed)";
    EXPECT_EQ(g_v_bad[t], 0) << "V tile " << t << ": rows with other bits (-1: never landed)";
  }
}

}  // namespace
}  // namespace cpgen
