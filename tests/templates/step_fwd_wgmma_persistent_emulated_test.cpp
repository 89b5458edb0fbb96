// The persistent launch of the sm_90a forward step kernel (step_fwd_wgmma.cuh, kPersistent) in the
// cases only it has, run by the emulator against float64: the number of resident CTAs at both
// ends (one CTA for every query block, one CTA per block), the L2 sections of its item order, the
// ping-pong schedule inside it, one consumer warpgroup, and the fixed stride without a work
// counter (every other case takes its items from one, as the runtime launches it; the harness
// checks the counter's end). The checks it shares with the
// ping-pong schedule are step_fwd_wgmma_schedules_emulated_test.cpp's.
#include <gtest/gtest.h>

#include <string>

// Last: includes the emulator and the kernel template.
#include "wgmma_ring_harness.h"

namespace cpgen {
namespace {

using namespace wgmma_harness;  // NOLINT: the harness is this test's vocabulary (kernels included)

using PersistentBf16 = WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 4, false, false, false, true>;
// Both the ping-pong turns and the mask features: the turns carried from one block to the next.
using PersistentPingPongMasked = WgmmaFwdTraits<Bf16, 64, 128, 64, 2, 2, true, 4, true, true, true, true>;
// One consumer warpgroup: 64-row blocks, so twice the blocks per CTA.
using PersistentOneConsumer = WgmmaFwdTraits<Fp16, 64, 64, 64, 1, 2, true, 1, false, false, false, true>;

// Three consumer warpgroups: 192-row blocks, the producer at 32 registers and the consumers at 160.
using PersistentThreeConsumers = WgmmaFwdTraits<Bf16, 64, 192, 64, 3, 2, true, 2, false, false, false, true>;

static_assert(PersistentBf16::kPersistent && !PersistentBf16::kPingPong);

// A single CTA runs every block of the launch (the longest chain of Q reloads and stage phases),
// and as many CTAs as blocks (each runs one, as the non-persistent grid would).
TEST(StepFwdWgmmaPersistentEmulated, OneCtaForEverythingAndOneCtaPerBlock) {
  const testing::AttentionProblem p = testing::random_problem(2, 8, 2, 64, 2 * 2 * 64, true, 54);
  for (int resident : {1, 1000}) {
    SCOPED_TRACE("resident CTAs " + std::to_string(resident));
    check_zigzag_reads<PersistentBf16>(p, 2, resident);
  }
}

// The L2 sections of the item order: one pair per section (the plain grid's order), two over five
// pairs (the last section holds one), and one section over all of them; 2 CTAs, so that a CTA's
// items cross from one section into the next.
TEST(StepFwdWgmmaPersistentEmulated, SectionsOfOneTwoAndEveryPair) {
  const testing::AttentionProblem p = testing::random_problem(5, 4, 1, 64, 2 * 2 * 64, true, 58);
  for (int section_pairs : {1, 2, 1000}) {
    SCOPED_TRACE("pairs per section " + std::to_string(section_pairs));
    const SkipCounts skips = check_zigzag_reads<PersistentBf16>(p, 2, 2, section_pairs);
    EXPECT_GT(skips.empty_blocks, 0);
  }
}

// The ping-pong schedule in the persistent launch, with the mask features
// (check_documents_window_softcap_ring: documents, a window and a softcap over a zigzag ring of
// three, reads checked).
TEST(StepFwdWgmmaPersistentEmulated, PingPongMaskedDocumentsWindowSoftcapZigzagRingOfThree) {
  SkipCounts skips;
  check_documents_window_softcap_ring<PersistentPingPongMasked>(testing::random_problem(1, 4, 1, 64, 300, true, 57),
                                                                &skips);
  EXPECT_GT(skips.skipped_tiles, 0);
  EXPECT_GT(skips.empty_blocks, 0);
}

// Without a work counter (a null pointer) each CTA steps through the items by the grid's size: the
// same hand-over to the consumers, over 2 and 3 CTAs, reads checked.
TEST(StepFwdWgmmaPersistentEmulated, WithoutAWorkCounterEachCtaStepsByTheGrid) {
  const testing::AttentionProblem p = testing::random_problem(2, 8, 2, 64, 2 * 2 * 64, true, 59);
  for (int resident : {2, 3}) {
    SCOPED_TRACE("resident CTAs " + std::to_string(resident));
    RingSetup setup;
    setup.shape = shape_of(p);
    setup.ranks = partition(Scheme::kZigzag, p.seq_len, 2);
    setup.count_reads = true;
    setup.resident_ctas = resident;
    setup.work_counter = false;
    SkipCounts skips;
    check_setup<PersistentBf16>(p, testing::reference_attention(p), setup, &skips);
  }
}

// One consumer warpgroup: causal, striped (every tile straddles the diagonal), a ring of two.
TEST(StepFwdWgmmaPersistentEmulated, OneConsumerCausalStripedRingOfTwo) {
  check_random<PersistentOneConsumer>(2, 2, 2 * 2 * 70, 56, 2, Split::kStriped);
}

// Three consumers in the persistent launch: two CTAs over more blocks than CTAs (GQA 2, 200 local
// rows: 400 packed rows, three 192-row blocks per (batch, kv head), the last partial), reads checked.
TEST(StepFwdWgmmaPersistentEmulated, ThreeConsumersOverMoreBlocksThanCtas) {
  const testing::AttentionProblem p = testing::random_problem(1, 2, 1, 64, 2 * 2 * 100, true, 59);
  const SkipCounts skips = check_zigzag_reads<PersistentThreeConsumers>(p, 2, 2);
  EXPECT_GT(skips.skipped_tiles, 0) << "the causal blocks skip the key tiles past their diagonal";
}

}  // namespace
}  // namespace cpgen
