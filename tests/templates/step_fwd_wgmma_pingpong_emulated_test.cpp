// The ping-pong schedule of the sm_90a forward step kernel (step_fwd_wgmma.cuh, kPingPong: the
// two consumer warpgroups take turns issuing their MMAs through CTA barriers 1 and 2) run on the
// CPU by the emulator, whose barriers report a turn that never comes as a deadlock and a phase
// left open as a finding. Against float64: blocks with no key tile next to blocks with several
// (no turn may be taken or left then), the stage ring wrapping, rings of 1 to 4, the mask
// features, and the reference vectors. Three kernels: each costs seconds of host compile.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

// Last: includes the emulator and the kernel template.
#include "wgmma_ring_harness.h"

namespace cpgen {
namespace {

using namespace wgmma_harness;  // NOLINT: the harness is this test's vocabulary
using device::Bf16;
using device::Fp16;
using device::WgmmaFwdTraits;

using PingPongBf16 = WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 4, false, false, true>;
using PingPongFp16 = WgmmaFwdTraits<Fp16, 64, 128, 64, 2, 3, false, 1, false, false, true>;
using PingPongMasked = WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 4, true, true, true>;

static_assert(PingPongBf16::kPingPong && PingPongBf16::kConsumers == 2);

// GQA 4 over a zigzag ring of two, 128 positions per rank, 32 queries per block: at step 1 rank
// 0's blocks of positions 0-63 see none of rank 1's keys (64-191) and run no tile, while its
// blocks of 192-255 run two; rank 1's blocks run one tile of rank 0's chunk and skip the other.
TEST(StepFwdWgmmaPingPongEmulated, Bf16CausalGqa4BlocksWithAndWithoutTiles) {
  const SkipCounts skips =
      check_zigzag_reads<PingPongBf16>(testing::random_problem(1, 8, 2, 64, 2 * 2 * 64, true, 41), 2);
  EXPECT_GT(skips.empty_blocks, 0);
  EXPECT_GT(skips.skipped_tiles, 0);
}

// One step over five 64-key tiles through three stages (the ring wraps), a partial last tile;
// then a zigzag ring of four, whose middle steps read and write the running state.
TEST(StepFwdWgmmaPingPongEmulated, Fp16FullManyTilesAndRingOfFour) {
  check_random<PingPongFp16>(1, 1, 300, 42, 1);
  check_random<PingPongFp16>(2, 1, 2 * 4 * 40, 43, 4);
}

// The mask features under the ping-pong schedule (check_documents_window_softcap_ring).
TEST(StepFwdWgmmaPingPongEmulated, MaskedDocumentsWindowSoftcapZigzagRingOfThree) {
  SkipCounts skips;
  check_documents_window_softcap_ring<PingPongMasked>(testing::random_problem(1, 4, 1, 64, 300, true, 44), &skips);
  EXPECT_GT(skips.skipped_tiles, 0);
  EXPECT_GT(skips.empty_blocks, 0);
}

// The reference vectors at head dim 64 with a matching group and mask: the project's
// gqa4_causal_hd64 and mha_full_hd64 cases at least.
TEST(StepFwdWgmmaPingPongEmulated, ReferenceVectorsOverAZigzagRingOfTwo) {
  const VectorRun run = run_vector_cases<PingPongBf16, PingPongFp16>();
  std::printf("ping-pong kernels ran %d vector cases; no matching kernel here for:%s\n", run.ran, run.skipped.c_str());
  EXPECT_GE(run.repo_ran, 2);
}

}  // namespace
}  // namespace cpgen
