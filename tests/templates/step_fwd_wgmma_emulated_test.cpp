// The sm_90a forward step kernel (templates/step_fwd_wgmma.cuh) run on the CPU by the CUDA
// emulator with its Hopper primitives: TMA loads from tensor maps built from the template's own
// map descriptions, mbarrier rings, wgmma from descriptors and registers, all checked by the
// sanitizer. Zigzag rings of 1, 2 and 4 ranks against float64, outputs and state poisoned first.
// Problems are the smallest that still run several key tiles, wrap the stage ring and leave a
// partial last tile: each wgmma is emulated element by element.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "emulation/tensor_map.h"
#include "ring_step_harness.h"
#include "test_util.h"

// Last: defines __CUDACC__ and the CUDA keywords for the template headers below.
#include "emulation/cuda_emulation.h"
#include "cpgen/step_fwd_wgmma.cuh"

namespace cpgen {
namespace {

using testing::AttentionOutput;
using testing::AttentionProblem;

// Encodes one map from its description with the emulator's encoder (the backend hands the same
// fields to cuTensorMapEncodeTiled).
std::string encode(const TmaMapDescription& d, device::TmaMap* map) {
  const uint32_t ones[5] = {1, 1, 1, 1, 1};
  static_assert(sizeof(device::TmaMap) == sizeof(emulation::TensorMap));
  return emulation::encode_tensor_map_tiled(reinterpret_cast<emulation::TensorMap*>(map), d.data_type, d.rank, d.global,
                                            d.dims, d.strides, d.box, ones, 0, d.swizzle, 0, 0);
}

template <typename Traits>
testing::RingRun run_emulated(const AttentionProblem& p, const std::vector<std::vector<int>>& ranks) {
  constexpr bool kBf16 = std::is_same_v<typename Traits::Element, device::Bf16>;
  const Dtype dtype = kBf16 ? Dtype::kBf16 : Dtype::kFp16;
  const int B = p.batch, HQ = p.q_heads, HK = p.kv_heads, D = p.head_dim, S = p.seq_len;
  const int pitch = D + testing::kRowPad, n = static_cast<int>(ranks.size());
  testing::RingRun run;
  std::vector<std::vector<uint16_t>> k_chunks, v_chunks;
  for (const auto& positions : ranks) {
    k_chunks.push_back(testing::gather_rows(p.k, B, HK, S, D, positions, dtype));
    v_chunks.push_back(testing::gather_rows(p.v, B, HK, S, D, positions, dtype));
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int r = 0; r < n; ++r) {
    const std::vector<int>& q_positions = ranks[r];
    const int q_len = static_cast<int>(q_positions.size());
    std::vector<uint16_t> q = testing::gather_rows(p.q, B, HQ, S, D, q_positions, dtype);
    std::vector<uint16_t> out(static_cast<size_t>(B) * HQ * q_len * pitch, testing::kPoison16);
    std::vector<float> lse(static_cast<size_t>(B) * HQ * q_len, nan);
    std::vector<float> o_state(static_cast<size_t>(B) * HQ * q_len * D, nan);
    std::vector<float> m_state(lse.size(), nan), l_state(lse.size(), nan);
    for (int step = 0; step < n; ++step) {
      const int src = ((r - step) % n + n) % n;
      RingFwdWgmmaParams prm{};
      prm.base = testing::step_params(p, ranks, r, step);
      RingFwdParams& b = prm.base;
      b.q = q.data();
      b.k = k_chunks[src].data();
      b.v = v_chunks[src].data();
      b.out = out.data();
      b.lse = lse.data();
      b.o_state = o_state.data();
      b.m_state = m_state.data();
      b.l_state = l_state.data();
      b.q_positions = q_positions.data();
      b.kv_positions = ranks[src].data();
      for (const auto& [description, map] :
           {std::pair{device::q_map_description(b, kBf16, D, Traits::kGroup, Traits::kBlockM), &prm.q_map},
            std::pair{device::kv_map_description(b, false, kBf16, D, Traits::kBlockN), &prm.k_map},
            std::pair{device::kv_map_description(b, true, kBf16, D, Traits::kBlockN), &prm.v_map}}) {
        const std::string error = encode(description, map);
        if (!error.empty()) {
          run.failure = "tensor map: " + error;
          return run;
        }
      }
      // Every buffer the kernel may touch, so the sanitizer checks the TMA sources against them.
      const emulation::GlobalBuffer buffers[] = {{q.data(), q.size() * 2},
                                                 {k_chunks[src].data(), k_chunks[src].size() * 2},
                                                 {v_chunks[src].data(), v_chunks[src].size() * 2},
                                                 {out.data(), out.size() * 2},
                                                 {lse.data(), lse.size() * 4},
                                                 {o_state.data(), o_state.size() * 4},
                                                 {m_state.data(), m_state.size() * 4},
                                                 {l_state.data(), l_state.size() * 4},
                                                 {q_positions.data(), q_positions.size() * 4},
                                                 {ranks[src].data(), ranks[src].size() * 4}};
      emulation::set_global_buffers(buffers, static_cast<int>(std::size(buffers)));
      const unsigned grid_x = (q_len * Traits::kGroup + Traits::kBlockM - 1) / Traits::kBlockM;
      const device::FoldedPairs pairs = device::fold_pairs(B * HK);
      const std::string error = emulation::launch(grid_x, pairs.y, pairs.z, Traits::kThreads, Traits::kSharedBytes,
                                                  [&] { device::ring_fwd_step_wgmma<Traits>(prm); });
      emulation::set_global_buffers(nullptr, 0);
      if (!error.empty()) {
        run.failure = "rank " + std::to_string(r) + " step " + std::to_string(step) + ": " + error;
        return run;
      }
      ++run.launches;
    }
    testing::collect_rank(p, dtype, r, q_positions, out, lse, &run);
  }
  return run;
}

enum class Split { kZigzag, kStriped };

template <typename Traits>
void check(const AttentionProblem& p, const AttentionOutput& expected, int cp_size, const std::string& what,
           Split split = Split::kZigzag) {
  SCOPED_TRACE(what + ", " + std::to_string(cp_size) + " ranks");
  std::vector<std::vector<int>> ranks;
  if (split == Split::kStriped) {
    // rank r holds r, r + N, r + 2N, ...: every causal tile straddles the diagonal.
    ranks.resize(cp_size);
    for (int i = 0; i < p.seq_len; ++i) ranks[i % cp_size].push_back(i);
  } else if (cp_size == 1) {
    ranks.emplace_back();
    for (int i = 0; i < p.seq_len; ++i) ranks[0].push_back(i);
  } else {
    ranks = testing::zigzag_split(p.seq_len, cp_size);
  }
  testing::RingRun run = run_emulated<Traits>(p, ranks);
  ASSERT_TRUE(run.failure.empty()) << run.failure;
  ASSERT_EQ(run.launches, cp_size * cp_size);
  testing::Comparison c = testing::compare(expected, run.result, p.head_dim);
  EXPECT_LT(c.out_rel_frobenius, 2e-2) << "worst " << c.worst;
  EXPECT_LT(c.lse_max_abs, 2e-2);
}

template <typename Traits>
void check_random(int batch, int kv_heads, int seq_len, uint32_t seed, int cp_size, Split split = Split::kZigzag) {
  AttentionProblem p = testing::random_problem(batch, kv_heads * Traits::kGroup, kv_heads, Traits::kHeadDim, seq_len,
                                               Traits::kCausal, seed);
  check<Traits>(p, testing::reference_attention(p), cp_size, "random", split);
}

using device::Bf16;
using device::Fp16;
using device::WgmmaFwdTraits;

// The head dim 128 default: two consumer warpgroups, 128 x 128 tiles, two stages. 80 keys per
// rank chunk: one partial tile; the causal diagonal inside it.
TEST(StepFwdWgmmaEmulated, Bf16Hd128CausalDefaultOneStepAndZigzagRing) {
  using Traits = WgmmaFwdTraits<Bf16, 128, 128, 128, 2, 2, true, 1>;
  check_random<Traits>(1, 1, 2 * 2 * 40, 1, 2);
}

// Five 64-key tiles through two stages (the ring wraps twice), a partial last tile.
TEST(StepFwdWgmmaEmulated, Fp16Hd128FullManyTilesOneStep) {
  using Traits = WgmmaFwdTraits<Fp16, 128, 64, 64, 1, 2, false, 1>;
  check_random<Traits>(1, 1, 300, 2, 1);
}

// Head dim 64: one column block per row; three stages; rings of 1 and 4 (a middle step reads
// and writes the running state).
TEST(StepFwdWgmmaEmulated, Fp16Hd64CausalThreeStagesOneStepAndRingOfFour) {
  using Traits = WgmmaFwdTraits<Fp16, 64, 64, 64, 1, 3, true, 1>;
  check_random<Traits>(1, 1, 200, 3, 1);
  check_random<Traits>(1, 1, 2 * 4 * 24, 4, 4);
}

// Striped positions: no tile is mask-free, every one takes the per-row key limits.
TEST(StepFwdWgmmaEmulated, Fp16Hd64CausalStripedRingOfThree) {
  check_random<WgmmaFwdTraits<Fp16, 64, 64, 64, 1, 3, true, 1>>(1, 1, 3 * 40, 7, 3, Split::kStriped);
}

// 64-row chunks and 64-row query blocks: at step 1, rank 0's first block (positions 0-63) sees no
// key of rank 1's chunks (64-191), so it runs no tile (the producer loads only Q) and its rows
// merge an empty local state into the running one.
TEST(StepFwdWgmmaEmulated, QueryBlockWithNoVisibleKeyKeepsTheRunningState) {
  check_random<WgmmaFwdTraits<Fp16, 64, 64, 64, 1, 3, true, 1>>(1, 1, 2 * 2 * 64, 8, 2);
}

TEST(StepFwdWgmmaEmulated, Bf16Hd64FullTwoConsumersZigzagRingOfFour) {
  using Traits = WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, false, 1>;
  check_random<Traits>(2, 1, 2 * 4 * 24, 5, 4);
}

// GQA: the Q box (64 columns, 4 heads, 32 queries) loads packed rows in one copy per column
// block; two kv heads, so the head coordinate of the box moves.
TEST(StepFwdWgmmaEmulated, Bf16Hd64CausalGqa4ZigzagRing) {
  using Traits = WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 4>;
  check_random<Traits>(1, 2, 2 * 2 * 40, 6, 2);
}

// The reference vectors (the project's set and, when present, $CPGEN_VECTORS_DIR and
// ../shared/vectors) over a zigzag ring of 2, each case through the kernel above that matches its
// head dim, mask and group (cases no kernel here matches, such as windows, are listed and skipped:
// every extra kernel costs seconds of host compile). The in-repo cases at head dim 64 all match.
template <typename Traits>
bool try_vector_case(const AttentionProblem& p, const AttentionOutput& expected, const std::string& name) {
  if (p.head_dim != Traits::kHeadDim || p.causal != Traits::kCausal || p.q_heads != p.kv_heads * Traits::kGroup ||
      p.seq_len % 4 != 0)
    return false;
  check<Traits>(p, expected, 2, name);
  return true;
}

TEST(StepFwdWgmmaEmulated, ReferenceVectorsOverAZigzagRingOfTwo) {
  int ran = 0, repo_ran = 0;
  std::string skipped;
  for (const std::string& path : testing::vector_files()) {
    const std::string name = testing::vector_case_name(path);
    if (!testing::load_json(path).at("window").is_null()) {
      skipped += " " + name;
      continue;
    }
    AttentionOutput expected;
    const AttentionProblem p = testing::load_vector_case(path, &expected);
    const bool matched = try_vector_case<WgmmaFwdTraits<Bf16, 128, 128, 128, 2, 2, true, 1>>(p, expected, name) ||
                         try_vector_case<WgmmaFwdTraits<Fp16, 128, 64, 64, 1, 2, false, 1>>(p, expected, name) ||
                         try_vector_case<WgmmaFwdTraits<Fp16, 64, 64, 64, 1, 3, true, 1>>(p, expected, name) ||
                         try_vector_case<WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, false, 1>>(p, expected, name) ||
                         try_vector_case<WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 4>>(p, expected, name);
    if (!matched) {
      skipped += " " + name;
      continue;
    }
    ++ran;
    if (name.rfind("repo_", 0) == 0) ++repo_ran;
  }
  std::printf("wgmma kernel ran %d vector cases; no matching kernel here for:%s\n", ran, skipped.c_str());
  // gqa4_causal_hd64_s32, mha_causal_hd64_s64 (and its large-logits twin), mha_full_hd64_s32_b2.
  EXPECT_GE(repo_ran, 4);
}

}  // namespace
}  // namespace cpgen
