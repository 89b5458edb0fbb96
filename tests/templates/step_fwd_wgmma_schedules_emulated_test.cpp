// The sm_90a forward step kernel's other schedules (step_fwd_wgmma.cuh) run on the CPU by the
// emulator against float64, the same checks for each:
//   ping-pong   kPingPong: the two consumer warpgroups take turns issuing their MMAs through CTA
//               barriers 1 and 2; a turn that never comes is a deadlock, a phase left open a finding
//   persistent  kPersistent: at most RingSetup::resident_ctas (3) CTAs, each looping over query
//               blocks with its stage ring, Q barrier and turns carried from one to the next
// Blocks with no key tile next to blocks with several (no turn may be taken or left then, no Q
// loaded), the stage ring wrapping, rings of 1 to 4, the mask features, the reference vectors.
// Persistent-only cases are in step_fwd_wgmma_persistent_emulated_test.cpp. Each kernel costs
// seconds of host compile.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <type_traits>

// Last: includes the emulator and the kernel template.
#include "wgmma_ring_harness.h"

namespace cpgen {
namespace {

using namespace wgmma_harness;  // NOLINT: the harness is this test's vocabulary (kernels included)

// The three kernels of a schedule: bf16 causal GQA 4, fp16 full with three stages, bf16 with key
// intervals and softcap (the mask features).
template <bool kPingPong, bool kPersistent>
struct Schedule {
  using Bf16Causal = WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 4, false, false, kPingPong, kPersistent>;
  using Fp16Full = WgmmaFwdTraits<Fp16, 64, 128, 64, 2, 3, false, 1, false, false, kPingPong, kPersistent>;
  using Masked = WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 4, true, true, kPingPong, kPersistent>;
};
using PingPong = Schedule<true, false>;
using Persistent = Schedule<false, true>;

struct ScheduleNames {
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, PingPong> ? "PingPong" : "Persistent";
  }
};

template <typename S>
class StepFwdWgmmaScheduleEmulated : public ::testing::Test {};
using Schedules = ::testing::Types<PingPong, Persistent>;
TYPED_TEST_SUITE(StepFwdWgmmaScheduleEmulated, Schedules, ScheduleNames);

// GQA 4, two batch entries of two KV heads, over a zigzag ring of two, 128 positions per rank, 32
// queries per block: at step 1 rank 0's blocks of positions 0-63 see none of rank 1's keys
// (64-191) and run no tile, while its blocks of 192-255 run two; rank 1's blocks run one tile of
// rank 0's chunk and skip the other. Persistent: 2 blocks x 4 pairs = 8 per launch over 3 CTAs,
// so a CTA's blocks alternate between nothing and work. TMA reads checked block by block.
TYPED_TEST(StepFwdWgmmaScheduleEmulated, Bf16CausalGqa4BlocksWithAndWithoutTiles) {
  const SkipCounts skips = check_zigzag_reads<typename TypeParam::Bf16Causal>(
      testing::random_problem(2, 8, 2, 64, 2 * 2 * 64, true, 51), 2);
  EXPECT_GT(skips.empty_blocks, 0);
  EXPECT_GT(skips.skipped_tiles, 0);
}

// Five 64-key tiles per block through three stages (the ring wraps; a persistent CTA's second
// block starts it at phase 5 mod 3, its third at 10 mod 3), a partial last tile, one step (first
// and last at once); then a zigzag ring of four, whose middle steps read and write the state.
TYPED_TEST(StepFwdWgmmaScheduleEmulated, Fp16FullManyTilesAndRingOfFour) {
  check_random<typename TypeParam::Fp16Full>(2, 1, 300, 52, 1);
  check_random<typename TypeParam::Fp16Full>(2, 2, 2 * 4 * 40, 53, 4);
}

// The mask features (check_documents_window_softcap_ring: documents, a window and a softcap over
// a zigzag ring of three, reads checked).
TYPED_TEST(StepFwdWgmmaScheduleEmulated, MaskedDocumentsWindowSoftcapZigzagRingOfThree) {
  SkipCounts skips;
  check_documents_window_softcap_ring<typename TypeParam::Masked>(testing::random_problem(1, 4, 1, 64, 300, true, 55),
                                                                  &skips);
  EXPECT_GT(skips.skipped_tiles, 0);
  EXPECT_GT(skips.empty_blocks, 0);
}

// The reference vectors at head dim 64 with a matching group and mask: the project's
// gqa4_causal_hd64 and mha_full_hd64 cases at least.
TYPED_TEST(StepFwdWgmmaScheduleEmulated, ReferenceVectorsOverAZigzagRingOfTwo) {
  const VectorRun run = run_vector_cases<typename TypeParam::Bf16Causal, typename TypeParam::Fp16Full>();
  std::printf("%s kernels ran %d vector cases; no matching kernel here for:%s\n",
              ScheduleNames::GetName<TypeParam>(0).c_str(), run.ran, run.skipped.c_str());
  EXPECT_GE(run.repo_ran, 2);
}

}  // namespace
}  // namespace cpgen
