// The forward step kernel template itself, run on the CPU by the CUDA emulator
// (emulation/cuda_emulation.h): the same step_fwd.cuh source that NVRTC compiles, with mma.sync,
// ldmatrix, shuffles and barriers emulated from their PTX definitions. Checks a few tile configs
// (pipeline depths 1-3, key sub-tiles, both swizzles, GQA packing) over zigzag rings of steps
// against float64, with the same poisoning and tolerances as the GPU tests. This is what checks
// the kernel's logic on machines without a GPU; it says nothing about timing or memory ordering.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "error_limit.h"
#include "ring_step_harness.h"
#include "test_util.h"

// Last: defines __CUDACC__ and the CUDA keywords for the template headers below.
#include "emulation/cuda_emulation.h"
#include "emulation/finding_test_util.h"
#include "cpgen/step_fwd.cuh"
#include "element_dtype.h"

namespace cpgen {
namespace {

using testing::AttentionOutput;
using testing::AttentionProblem;

template <typename Traits>
testing::RingRun run_emulated(const AttentionProblem& p, const std::vector<std::vector<int>>& ranks,
                              unsigned max_grid_y) {
  const Dtype dtype = testing::element_dtype<typename Traits::Element>();
  const int B = p.batch, HQ = p.q_heads, HK = p.kv_heads, D = p.head_dim, S = p.seq_len;
  const int pitch = D + testing::kRowPad, n = static_cast<int>(ranks.size());
  testing::RingRun run;
  std::vector<std::vector<uint16_t>> k_chunks, v_chunks;
  for (const auto& positions : ranks) {
    k_chunks.push_back(testing::gather_rows(p.k, B, HK, S, D, positions, dtype));
    v_chunks.push_back(testing::gather_rows(p.v, B, HK, S, D, positions, dtype));
  }
  // The state's and lse's fill: all ones, as the emulated device fills an allocation, so that the
  // sanitizer reports a read of any word nothing wrote (GlobalBuffer::poisoned; a NaN too).
  const float nan = std::bit_cast<float>(0xFFFFFFFFu);
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
      RingFwdParams prm = testing::step_params(p, ranks, r, step);
      prm.q = q.data();
      prm.k = k_chunks[src].data();
      prm.v = v_chunks[src].data();
      prm.out = out.data();
      prm.lse = lse.data();
      prm.o_state = o_state.data();
      prm.m_state = m_state.data();
      prm.l_state = l_state.data();
      prm.q_positions = q_positions.data();
      prm.kv_positions = ranks[src].data();
      const unsigned grid_x = (q_len * Traits::kGroup + Traits::kBlockM - 1) / Traits::kBlockM;
      // The (batch, kv head) pairs folded over y and z as the host launcher folds them.
      const device::FoldedPairs pairs = device::fold_pairs(B * HK, max_grid_y);
      // Every buffer the kernel may touch, each poisoned (row padding, out, lse and the state start
      // all ones): the sanitizer checks the accesses against them and reports unwritten words read.
      const testing::LaunchBuffers buffers(testing::poisoned_buffers(
          q, k_chunks[src], v_chunks[src], out, lse, o_state, m_state, l_state, q_positions, ranks[src]));
      const std::string error = emulation::launch(grid_x, pairs.y, pairs.z, Traits::kThreads, Traits::kSharedBytes,
                                                  [&] { device::ring_fwd_step<Traits>(prm); });
      if (!error.empty()) {
        run.failure = error;
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
           Split split = Split::kZigzag, unsigned max_grid_y = device::kMaxGridYZ) {
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
  testing::RingRun run = run_emulated<Traits>(p, ranks, max_grid_y);
  ASSERT_TRUE(run.failure.empty()) << run.failure;
  testing::Comparison c = testing::compare(expected, run.result, p.head_dim);
  const Dtype dtype = testing::element_dtype<typename Traits::Element>();
  testing::expect_within_limit(c.out_rel_frobenius, dtype, what + " out, worst " + c.worst, testing::kOutputUlps);
  testing::expect_within_limit(c.lse_max_abs, dtype, what + " lse");
}

template <typename Traits>
void check_random(int batch, int kv_heads, int seq_len, uint32_t seed, int cp_size, Split split = Split::kZigzag,
                  unsigned max_grid_y = device::kMaxGridYZ) {
  AttentionProblem p = testing::random_problem(batch, kv_heads * Traits::kGroup, kv_heads, Traits::kHeadDim,
                                               seq_len, Traits::kCausal, seed);
  check<Traits>(p, testing::reference_attention(p), cp_size, "random", split, max_grid_y);
}

using device::Bf16;
using device::Fp16;
using device::FwdTraits;

// The default of head dim 128: 32 rows per warp, 64-key tiles scored whole.
TEST(StepFwdEmulated, Bf16Hd128CausalGqa4DefaultOverAZigzagRing) {
  using Traits = FwdTraits<Bf16, 128, 128, 64, 4, 2, true, 4>;
  static_assert(Traits::kSubKeys == 64 && Traits::kSubTiles == 1);
  check_random<Traits>(1, 1, 2 * 2 * 45, 1, 2);
}

// 128-key tiles scored as two 64-key sub-tiles. With 90 keys per chunk (2 ranks of 180 rows) the
// second sub-tile is partial (keys 64-89); with 60 it starts past the chunk's end and is skipped.
// Causal tiles straddling the diagonal mask each sub-tile by its own keys.
TEST(StepFwdEmulated, Fp16Hd64Causal128KeyTilesInTwoSubTiles) {
  using Traits = FwdTraits<Fp16, 64, 128, 128, 4, 2, true, 2>;
  static_assert(Traits::kSubKeys == 64 && Traits::kSubTiles == 2);
  check_random<Traits>(1, 1, 2 * 2 * 45, 12, 2);
  check_random<Traits>(1, 1, 2 * 2 * 30, 13, 2);
}

TEST(StepFwdEmulated, Bf16Hd128CausalGqa2MatchesTheVectors) {
  using Traits = FwdTraits<Bf16, 128, 128, 64, 4, 2, true, 2>;
  AttentionOutput expected;
  AttentionProblem p =
      testing::load_vector_case(testing::vectors_dir() + "/gqa2_causal_hd128_s32.json", &expected);
  check<Traits>(p, expected, 2, "gqa2_causal_hd128_s32");
}

// Head dim 96: the 12-chunk swizzle; full attention; a partial last tile of every chunk.
TEST(StepFwdEmulated, Fp16Hd96FullOneStepAndRing) {
  using Traits = FwdTraits<Fp16, 96, 128, 64, 4, 2, false, 1>;
  check_random<Traits>(2, 1, 100, 2, 1);
  check_random<Traits>(1, 2, 2 * 3 * 21, 3, 3);
}

// Scores that climb along the keys (make_scores_climb): the running max passes its lag every few
// 64-key tiles, so the warp-wide rescale of out_acc runs inside the loop and across the steps of
// a ring of three (random scores leave it to a row's first tile).
TEST(StepFwdEmulated, Bf16Hd128CausalClimbingScoresRescaleInTheLoop) {
  using Traits = FwdTraits<Bf16, 128, 128, 64, 4, 2, true, 4>;
  AttentionProblem p = testing::random_problem(1, 4, 1, 128, 2 * 3 * 64, true, 22);
  testing::make_scores_climb(p, 8);
  check<Traits>(p, testing::reference_attention(p), 3, "climbing");
}

// Regression: with three or more ring steps a middle step both reads and writes m_state/l_state;
// a quad leader overwrote a row's m before the other lanes of its quad had read it.
TEST(StepFwdEmulated, MiddleRingStepsReadTheStateBeforeItIsOverwritten) {
  check_random<FwdTraits<Bf16, 64, 64, 64, 4, 2, true, 1>>(1, 1, 2 * 4 * 16, 7, 4);
  check_random<FwdTraits<Fp16, 64, 128, 64, 4, 2, false, 2>>(1, 1, 2 * 3 * 21, 8, 3);
}

TEST(StepFwdEmulated, Fp16Hd96CausalMqaMatchesTheVectors) {
  using Traits = FwdTraits<Fp16, 96, 128, 64, 4, 2, true, 2>;
  AttentionOutput expected;
  AttentionProblem p = testing::load_vector_case(testing::vectors_dir() + "/mqa_causal_hd96_s48.json", &expected);
  check<Traits>(p, expected, 1, "mqa_causal_hd96_s48");
}

// Head dim 256 at 16 rows per warp; three pipeline stages with 32-key tiles at head dim 64.
TEST(StepFwdEmulated, Bf16Hd256CausalDefault) {
  check_random<FwdTraits<Bf16, 256, 64, 64, 4, 2, true, 1>>(1, 1, 2 * 2 * 24, 4, 2);
}

TEST(StepFwdEmulated, Fp16Hd64CausalGqa2ThreeStagesTwoWarps) {
  check_random<FwdTraits<Fp16, 64, 64, 32, 2, 3, true, 2>>(1, 1, 2 * 2 * 50, 5, 2);
}

// Striped positions: the mask-free prefix is empty and every tile takes the per-row key limits.
TEST(StepFwdEmulated, Bf16Hd64CausalGqa4StripedRing) {
  check_random<FwdTraits<Bf16, 64, 64, 32, 4, 2, true, 4>>(2, 1, 3 * 40, 9, 3, Split::kStriped);
}

TEST(StepFwdEmulated, Bf16Hd64FullOneStageEightWarps) {
  check_random<FwdTraits<Bf16, 64, 128, 64, 8, 1, false, 1>>(1, 2, 150, 6, 1);
}

// batch * kv_heads above grid.y's 65535 is folded into grid.z (layout.cuh fold_pairs). A fake
// limit runs the fold on tiny problems: 5 pairs at most 2 per layer are y = 2, z = 3, whose sixth
// block has no pair and must return without touching memory; 6 pairs at most 4 per layer fill
// y = 3, z = 2 exactly. Every output element of every pair is checked (outputs start poisoned).
TEST(StepFwdEmulated, BatchKvHeadPairsFoldedOverGridYAndZ) {
  using Traits = FwdTraits<Bf16, 64, 64, 32, 4, 2, true, 2>;
  ASSERT_EQ(device::fold_pairs(5, 2).y, 2u);
  ASSERT_EQ(device::fold_pairs(5, 2).z, 3u);
  check_random<Traits>(5, 1, 2 * 2 * 16, 10, 2, Split::kZigzag, 2);
  ASSERT_EQ(device::fold_pairs(6, 4).y, 3u);
  ASSERT_EQ(device::fold_pairs(6, 4).z, 2u);
  check_random<Traits>(3, 2, 2 * 2 * 16, 11, 2, Split::kZigzag, 4);
}

}  // namespace
}  // namespace cpgen
