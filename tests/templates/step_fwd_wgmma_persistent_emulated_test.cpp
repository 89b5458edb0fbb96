// The persistent launch of the sm_90a forward step kernel (step_fwd_wgmma.cuh, kPersistent: a few
// CTAs, each looping over query blocks with its stage ring, Q barrier and ping-pong turns carried
// from one block to the next) run on the CPU by the emulator against float64. The harness
// launches it over at most RingSetup::resident_ctas CTAs (3 unless a test says otherwise), so
// every CTA takes several blocks of every launch here: blocks with no key tile between blocks with
// several, tile counts that leave the stage ring at every phase when the next block starts, the
// mask features, rings of 1 to 4, and the reference vectors. Sanitizer and deadlock checks as for
// every emulated launch.
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

using PersistentBf16 = WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 4, false, false, false, true>;
using PersistentFp16 = WgmmaFwdTraits<Fp16, 64, 128, 64, 2, 3, false, 1, false, false, false, true>;
// Both the ping-pong turns and the mask features, one consumer pair per block.
using PersistentPingPongMasked = WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 4, true, true, true, true>;
// One consumer warpgroup: 64-row blocks, so twice the blocks per CTA.
using PersistentOneConsumer = WgmmaFwdTraits<Fp16, 64, 64, 64, 1, 2, true, 1, false, false, false, true>;

static_assert(PersistentBf16::kPersistent && !PersistentBf16::kPingPong);
static_assert(PersistentPingPongMasked::kPersistent && PersistentPingPongMasked::kPingPong);

// GQA 4, two batch entries of two KV heads, over a zigzag ring of two with 128 positions per rank:
// 2 blocks x 4 pairs = 8 blocks per launch over 3 CTAs. At step 1 rank 0's blocks of positions
// 0-63 see none of rank 1's keys and are skipped while its blocks of 192-255 run two tiles, so a
// CTA's items alternate between nothing and work; the TMA reads are checked against the tile
// contract item by item.
TEST(StepFwdWgmmaPersistentEmulated, Bf16CausalGqa4BlocksWithAndWithoutTiles) {
  const SkipCounts skips =
      check_zigzag_reads<PersistentBf16>(testing::random_problem(2, 8, 2, 64, 2 * 2 * 64, true, 51), 2);
  EXPECT_GT(skips.empty_blocks, 0);
  EXPECT_GT(skips.skipped_tiles, 0);
}

// Five 64-key tiles per block through three stages: the second block of a CTA starts its stage
// ring at phase 5 mod 3, the third at 10 mod 3. One step (first and last at once), then a zigzag
// ring of four whose middle steps read and write the running state.
TEST(StepFwdWgmmaPersistentEmulated, Fp16FullStageRingCarriedAcrossBlocks) {
  check_random<PersistentFp16>(3, 2, 300, 52, 1);
  check_random<PersistentFp16>(2, 2, 2 * 4 * 40, 53, 4);
}

// A single CTA runs every block of the launch (the longest chain of Q reloads and stage phases),
// and as many CTAs as blocks (each runs one, as the non-persistent grid would).
TEST(StepFwdWgmmaPersistentEmulated, OneCtaForEverythingAndOneCtaPerBlock) {
  const testing::AttentionProblem p = testing::random_problem(2, 8, 2, 64, 2 * 2 * 64, true, 54);
  for (int resident : {1, 1000}) {
    SCOPED_TRACE("resident CTAs " + std::to_string(resident));
    check_zigzag_reads<PersistentBf16>(p, 2, resident);
  }
}

// The mask features and the ping-pong turns in a persistent CTA (check_documents_window_softcap_ring:
// documents, a window and a softcap over a zigzag ring of three, reads checked).
TEST(StepFwdWgmmaPersistentEmulated, PingPongMaskedDocumentsWindowSoftcapZigzagRingOfThree) {
  SkipCounts skips;
  check_documents_window_softcap_ring<PersistentPingPongMasked>(testing::random_problem(1, 4, 1, 64, 300, true, 55),
                                                                &skips);
  EXPECT_GT(skips.skipped_tiles, 0);
  EXPECT_GT(skips.empty_blocks, 0);
}

// One consumer warpgroup: causal, striped (every tile straddles the diagonal), a ring of two.
TEST(StepFwdWgmmaPersistentEmulated, OneConsumerCausalStripedRingOfTwo) {
  check_random<PersistentOneConsumer>(2, 2, 2 * 2 * 70, 56, 2, Split::kStriped);
}

// The reference vectors at head dim 64 with a matching group and mask.
TEST(StepFwdWgmmaPersistentEmulated, ReferenceVectorsOverAZigzagRingOfTwo) {
  const VectorRun run = run_vector_cases<PersistentBf16, PersistentFp16>();
  std::printf("persistent kernels ran %d vector cases; no matching kernel here for:%s\n", run.ran,
              run.skipped.c_str());
  EXPECT_GE(run.repo_ran, 2);
}

}  // namespace
}  // namespace cpgen
