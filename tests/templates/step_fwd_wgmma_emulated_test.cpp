// The sm_90a forward step kernel (templates/step_fwd_wgmma.cuh) run on the CPU by the CUDA
// emulator with its Hopper primitives: TMA loads from tensor maps built from the template's own
// map descriptions, mbarrier rings, wgmma from descriptors and registers, all checked by the
// sanitizer. Zigzag, striped, zigzag-token and contiguous rings of 1 to 4 ranks against float64,
// outputs and state poisoned first; the mask contract (key intervals for windows and documents, softcap,
// unequal shards, bshd strides, query views through state_len) with every launch's TMA reads
// checked against the key tiles the contract lets a block load. Problems are the smallest that
// still run several key tiles, wrap the stage ring and leave a partial last tile: each wgmma is
// emulated element by element, and each kernel instantiation costs seconds of build time.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

// Last: includes the emulator and the kernel template.
#include "wgmma_ring_harness.h"

namespace cpgen {
namespace {

using namespace wgmma_harness;  // NOLINT: the harness is this test's vocabulary (kernels included)

// The head dim 128 default: two consumer warpgroups, 128 x 128 tiles, two stages. 80 keys per
// rank chunk: one partial tile; the causal diagonal inside it.
TEST(StepFwdWgmmaEmulated, Bf16Hd128CausalDefaultOneStepAndZigzagRing) {
  using Traits = WgmmaFwdTraits<Bf16, 128, 128, 128, 2, 2, true, 1>;
  check_random<Traits>(1, 1, 2 * 2 * 40, 1, 2);
}

// Scores that climb along the keys (make_scores_climb): the running max passes its lag every
// tile or two, so the in-loop O rescale runs (random scores leave it to the first tile), over a
// zigzag ring of two whose later step starts from a state the climb has already moved.
TEST(StepFwdWgmmaEmulated, Bf16Hd128CausalClimbingScoresRescaleInTheLoop) {
  using Traits = WgmmaFwdTraits<Bf16, 128, 128, 128, 2, 2, true, 1>;
  AttentionProblem p = testing::random_problem(1, 1, 1, 128, 2 * 2 * 160, true, 21);
  testing::make_scores_climb(p, 12);
  check<Traits>(p, testing::reference_attention(p), 2, "climbing");
}

// The softcap alone on the head dim 128 causal default (the causal tile range, no key
// intervals), whose key loop once kept its bound in local memory: three 128-key tiles per chunk
// over a zigzag ring of two, logits bent by a cap of 2.
TEST(StepFwdWgmmaEmulated, Bf16Hd128CausalSoftcapZigzagRingOfTwo) {
  using Traits = WgmmaFwdTraits<Bf16, 128, 128, 128, 2, 2, true, 1, false, true>;
  const AttentionProblem p = testing::random_problem(1, 1, 1, 128, 2 * 2 * 160, true, 41);
  RingSetup setup;
  setup.shape = shape_of(p);
  setup.shape.softcap = 2.0;
  setup.ranks = partition(Scheme::kZigzag, p.seq_len, 2);
  check_setup<Traits>(p, reference_of(p, setup.shape), setup);
}

// The same softcap kernel at head dim 64 with every .approx instruction (ex2 in the softmax, ex2
// and rcp in the cap's tanh) at an edge of the PTX ISA's error bound, as a GPU may return it: a
// cap of 1 that bends most scores, and a cap of 50 over logits of that size (softmax scale 0.5),
// where tanh.approx put the mma.sync family's lse past the limit (EmulatedRingMask.Softcap-
// WithinTheIsasApproximationBounds; emulation/cuda_emulation.h, "The .approx
// instructions"; the harness launches on this thread, whose mode it is).
TEST(StepFwdWgmmaEmulated, SoftcapWithinTheIsasApproximationBounds) {
  using Traits = WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 1, false, true>;
  for (const auto& [cap, scale] : {std::pair{1.0, 0.125}, std::pair{50.0, 0.5}}) {
    AttentionProblem p = testing::random_problem(1, 1, 1, 64, 2 * 2 * 96, true, 43);
    p.softmax_scale = scale;
    RingSetup setup;
    setup.shape = shape_of(p);
    setup.shape.softcap = cap;
    setup.ranks = partition(Scheme::kZigzag, p.seq_len, 2);
    const auto want = reference_of(p, setup.shape);
    for (emulation::Approximation mode :
         {emulation::Approximation::kHigh, emulation::Approximation::kLow, emulation::Approximation::kMixed}) {
      SCOPED_TRACE("cap " + std::to_string(cap) + ", mode " + std::to_string(static_cast<int>(mode)));
      struct Restore {
        ~Restore() { emulation::set_approximation(emulation::Approximation::kCorrectlyRounded); }
      } restore;
      emulation::set_approximation(mode);
      check_setup<Traits>(p, want, setup);
    }
  }
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

// Zigzag-token positions: the strides alternate on most ranks (1 and 5 on ranks 0 and 2 of
// three), so the block ranges' search (mask.cuh count_at_or_before_in_runs) often misses its
// probes and ends narrowing or in its binary search (Mask.* check every case on the host).
TEST(StepFwdWgmmaEmulated, Fp16Hd64CausalZigzagTokenRingsOfThreeAndFour) {
  check_random<WgmmaFwdTraits<Fp16, 64, 64, 64, 1, 3, true, 1>>(1, 1, 3 * 80, 9, 3, Split::kZigzagToken);
  check_random<WgmmaFwdTraits<Fp16, 64, 64, 64, 1, 3, true, 1>>(1, 1, 4 * 80, 10, 4, Split::kZigzagToken);
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

// GQA 16 (Llama-3-405B's 128 query heads over 8 kv heads): the Q box holds 16 heads of 4 queries
// per consumer, a 128-row block 8 queries, so the causal diagonal crosses a block every 8
// positions; 48 keys per chunk leave every tile partial.
TEST(StepFwdWgmmaEmulated, Bf16Hd64CausalGqa16ZigzagRing) {
  using Traits = WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 16>;
  check_random<Traits>(1, 1, 2 * 2 * 24, 12, 2);
}

// Head dim 256: four column blocks per row, O of 128 registers per consumer thread, 64-key
// tiles (the default); 80 keys per chunk leave a partial second tile.
TEST(StepFwdWgmmaEmulated, Bf16Hd256CausalDefaultZigzagRingOfTwo) {
  using Traits = WgmmaFwdTraits<Bf16, 256, 128, 64, 2, 2, true, 1>;
  check_random<Traits>(1, 1, 2 * 2 * 40, 9, 2);
}

// 176-key tiles (wgmma N = 176, eleven k-steps of P V): 400 keys are two whole tiles and a
// partial one, so the two-stage ring wraps; unmasked, the default-sized query block.
TEST(StepFwdWgmmaEmulated, Bf16Hd128Full176KeyTilesOneStep) {
  check_random<WgmmaFwdTraits<Bf16, 128, 128, 176, 2, 2, false, 1>>(1, 1, 400, 10, 1);
}

// 176-key tiles under a causal mask and GQA 2 over a zigzag ring of two: each 200-key chunk is a
// whole tile and a 24-key partial one, the diagonal inside the first.
TEST(StepFwdWgmmaEmulated, Fp16Hd64Causal176KeyTilesGqa2ZigzagRing) {
  check_random<WgmmaFwdTraits<Fp16, 64, 64, 176, 1, 3, true, 2>>(1, 1, 2 * 2 * 100, 11, 2);
}

// 80-key tiles at head dim 256 (wgmma N = 80, five k-steps of P V; S 40 + O 128 registers):
// 200 keys per chunk are two whole tiles and a 40-key partial one, so the two-stage ring wraps;
// causal over a zigzag ring of two, GQA 2.
TEST(StepFwdWgmmaEmulated, Fp16Hd256Causal80KeyTilesGqa2ZigzagRing) {
  check_random<WgmmaFwdTraits<Fp16, 256, 128, 80, 2, 2, true, 2>>(1, 1, 2 * 2 * 100, 16, 2);
}

// Three consumer warpgroups (192-row blocks, 512 threads, 160 registers each: FlashAttention-3's
// split at head dim 64). A zigzag ring of two with 200 local rows: a whole block and an 8-row one
// whose second and third consumers have no rows; and a ring of four with 96 local rows, one block
// whose third consumer is empty and whose second holds a partial 32.
TEST(StepFwdWgmmaEmulated, Fp16Hd64CausalThreeConsumersZigzagRingsOfTwoAndFour) {
  using Traits = WgmmaFwdTraits<Fp16, 64, 192, 128, 3, 2, true, 1>;
  static_assert(Traits::kThreads == 512 && Traits::kConsumerRegisters == 160);
  check_random<Traits>(1, 1, 2 * 2 * 100, 13, 2);
  check_random<Traits>(1, 1, 2 * 4 * 48, 14, 4);
}

// Three consumers at head dim 128 with 64-key tiles (S 32 + O 64 registers, the three-consumer
// budget), bf16, GQA 4: the 192-row block holds 48 positions of four heads.
TEST(StepFwdWgmmaEmulated, Bf16Hd128CausalThreeConsumersGqa4ZigzagRingOfFour) {
  check_random<WgmmaFwdTraits<Bf16, 128, 192, 64, 3, 3, true, 4>>(1, 1, 2 * 4 * 40, 15, 4);
}

// ---- The mask contract, state_len and strides -------------------------------------------------

// A launch over a view of the queries (the zigzag query-half step) writes its rows of the rank's
// state through the state_len row pitch: every step runs as two views of 24 and the rest of the
// rows. With 8 query heads over 2 batch entries a kernel that took q_len as the pitch would write
// the wrong rows. Read counts check the causal tile range of a kernel without key intervals.
TEST(StepFwdWgmmaEmulated, QueryViewsWriteTheRankStateThroughStateLen) {
  using Traits = WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 4>;
  const AttentionProblem p = testing::random_problem(2, 8, 2, 64, 2 * 2 * 40, true, 21);
  RingSetup setup;
  setup.shape = shape_of(p);
  setup.ranks = partition(Scheme::kZigzag, p.seq_len, 2);
  setup.query_split = 24;
  setup.count_reads = true;
  SkipCounts skips;
  check_setup<Traits>(p, testing::reference_attention(p), setup, &skips);
  EXPECT_GT(skips.empty_blocks, 0);  // rank 0's first chunk sees nothing of rank 1's
}

// The masked kernel of the tests below: bf16, GQA 4, two consumer warpgroups, key intervals and
// softcap. One instantiation for every mask (the intervals carry causal, windows and documents).
using MaskedBf16 = WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 4, true, true>;

AttentionProblem masked_problem(int batch, int kv_heads, int group, int head_dim, int seq_len, uint32_t seed) {
  return testing::random_problem(batch, kv_heads * group, kv_heads, head_dim, seq_len, true, seed);
}

// Packed documents under a causal sliding window and a softcap over a zigzag ring of three
// (check_documents_window_softcap_ring): tiles of other documents and outside the window are
// skipped; the read counts match the tile contract launch by launch.
TEST(StepFwdWgmmaEmulated, MaskedDocumentsWindowSoftcapZigzagRingOfThree) {
  SkipCounts skips;
  check_documents_window_softcap_ring<MaskedBf16>(masked_problem(1, 1, 4, 64, 300, 31), &skips);
  EXPECT_GT(skips.skipped_tiles, 0);
  EXPECT_GT(skips.empty_blocks, 0);
}

// A contiguous ring of `ranks` over p with a left window of `window` keys and softcap 3, counting
// the tiles each launch reads.
RingSetup contiguous_window_setup(const AttentionProblem& p, int ranks, int window) {
  RingSetup setup;
  setup.shape = shape_of(p);
  setup.shape.window_left = window;
  setup.shape.softcap = 3.0;
  setup.ranks = partition(Scheme::kContiguous, p.seq_len, ranks);
  setup.count_reads = true;
  return setup;
}

// bshd tensors (flash-attn's layout: heads inside rows) read in place through the tensor maps'
// strides, two batch entries, on a contiguous ring of three with a window shorter than a shard:
// rank 0's middle step holds a chunk of the future and loads nothing, rank 2's blocks past the
// window's reach load no Q. Every step runs as two query views (state_len > q_len).
TEST(StepFwdWgmmaEmulated, MaskedBshdQueryViewsContiguousWindowRingOfThree) {
  const AttentionProblem p = masked_problem(2, 1, 4, 64, 3 * 80, 32);
  RingSetup setup = contiguous_window_setup(p, 3, 20);
  setup.bshd = true;
  setup.query_split = 37;
  SkipCounts skips;
  check_setup<MaskedBf16>(p, reference_of(p, setup.shape), setup, &skips);
  EXPECT_GT(skips.empty_launches, 0);
  EXPECT_GT(skips.empty_blocks, 0);
}

// A sliding window of several key tiles over a contiguous ring of two: rank 1's blocks over rank
// 0's chunk see its keys from past tile 0 on (a block of queries 512.. sees keys 212.., tile 3 of
// 64 keys) and run five tiles, so the tile whose scores each loop pass masks counts from the
// block's first tile, not from tile 0 (no other test has a block that starts past tile 0 and loops).
TEST(StepFwdWgmmaEmulated, MaskedWindowBlocksStartPastTheFirstKeyTileAndLoop) {
  const AttentionProblem p = masked_problem(1, 1, 4, 64, 2 * 512, 34);
  RingSetup setup = contiguous_window_setup(p, 2, 300);
  SkipCounts skips;
  check_setup<MaskedBf16>(p, reference_of(p, setup.shape), setup, &skips);
  EXPECT_GT(skips.skipped_tiles, 0);
}

// The second masked kernel: fp16, head dim 96 (three 64-byte swizzled column blocks: TMA boxes of
// 32 columns, wgmma descriptors in the 64-byte swizzle, O += P V with N = 96), GQA 2, 128-key
// tiles, key intervals without softcap, compiled non-causal: the mask is what the intervals say.
using MaskedFp16 = WgmmaFwdTraits<Fp16, 96, 128, 128, 2, 2, false, 2, true, false>;

// A two-sided window inside documents (not causal) on a contiguous ring of two, where the fourth
// query block's keys start at tile 1 (the producer must start there too), then plain causal
// attention given only by the intervals over a zigzag ring of two.
TEST(StepFwdWgmmaEmulated, Fp16Hd96IntervalsTwoSidedWindowAndCausal) {
  const AttentionProblem p = testing::random_problem(1, 2, 1, 96, 400, false, 33);
  RingSetup setup;
  setup.shape = shape_of(p);
  setup.shape.window_left = 24;
  setup.shape.window_right = 16;
  const std::vector<int64_t> documents = {150, 170, 80};
  setup.shape.cu_seqlens = cu_seqlens_of(documents);
  setup.ranks = partition(Scheme::kContiguous, p.seq_len, 2, documents);
  setup.count_reads = true;
  SkipCounts skips;
  {
    SCOPED_TRACE("two-sided window in documents");
    check_setup<MaskedFp16>(p, reference_of(p, setup.shape), setup, &skips);
  }
  EXPECT_GT(skips.skipped_tiles, 0);
  RingSetup causal = setup;
  causal.shape = shape_of(p);
  causal.shape.causal = true;
  causal.ranks = partition(Scheme::kZigzag, p.seq_len, 2);
  SCOPED_TRACE("causal by intervals");
  check_setup<MaskedFp16>(p, reference_of(p, causal.shape), causal);
}

// The reference vectors over a zigzag ring of 2, each case through the kernel above that matches
// its head dim, mask and group (cases no kernel here matches, such as windows, are listed and
// skipped: every extra kernel costs seconds of host compile). The in-repo cases at head dim 64
// all match.
TEST(StepFwdWgmmaEmulated, ReferenceVectorsOverAZigzagRingOfTwo) {
  const VectorRun run =
      run_vector_cases<WgmmaFwdTraits<Bf16, 128, 128, 128, 2, 2, true, 1>, WgmmaFwdTraits<Fp16, 128, 64, 64, 1, 2, false, 1>,
                       WgmmaFwdTraits<Fp16, 64, 64, 64, 1, 3, true, 1>, WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, false, 1>,
                       WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 4>, MaskedFp16>();
  std::printf("wgmma kernel ran %d vector cases; no matching kernel here for:%s\n", run.ran, run.skipped.c_str());
  // gqa4_causal_hd64_s32, mha_causal_hd64_s64 (and its large-logits twin), mha_full_hd64_s32_b2,
  // mqa_causal_hd96_s48.
  EXPECT_GE(run.repo_ran, 5);
}

}  // namespace
}  // namespace cpgen
