// Every constant of the sm_90a forward step kernel (step_fwd_wgmma.cuh), derived from the spec's
// parameters in one place and checked with static_assert. generator/kernel_spec_wgmma.cpp judges
// a spec's feasibility with the same wgmma_fwd_layout and budget.
//
// CTA shape: one producer warpgroup (one thread of it issues every TMA load; the others only give
// their registers away) and kConsumers consumer warpgroups, each owning 64 packed query rows (the
// M of one wgmma m64nNk16), so kBlockM = 64 * kConsumers.
//
// Shared memory, from a 1024-byte aligned base (the 128-byte swizzle repeats every 8 lines of 128
// bytes, the 64-byte one every 8 of 64, and a wgmma descriptor with base offset 0 assumes the
// pattern starts on that boundary; dynamic shared memory is only guaranteed 16-byte aligned, so
// kSharedBytes carries 1024 bytes of slack for the kernel to align up). With W the swizzle line
// (params_wgmma.cuh, wgmma_swizzle_bytes: 128 bytes, or 64 at head dim 96) and C = W / 2 its
// elements:
//   Q tile                  kHeadDim / C column blocks of [kBlockM rows][C elements]
//   K tiles, kStages        kHeadDim / C column blocks of [kBlockN rows][C elements] each
//   V tiles, kStages        the same
//   mbarriers               Q full, Q empty; per stage K full, V full, K empty, V empty (8 bytes
//                           each; Q empty paces a persistent CTA's next Q tile)
//   item handoff            persistent only: item full and item empty of two slots (8 bytes
//                           each), then the two slots' item indices (4 bytes each)
// A column block is one TMA box of W-byte rows in the W-byte swizzle, which is both what TMA
// writes and the canonical layout wgmma reads (K-major for Q and K, MN-major for V).
//
// K and V of a stage fill and drain through barriers of their own. A consumer is done with K_t
// once the S of tile t has retired, a whole P V earlier than with V_t; with one barrier pair per
// stage the producer could load neither K nor V of tile t + kStages before P_t V_t retired, and at
// 2 stages every tile's S then waited for a load issued the moment the tile before it finished.
#pragma once

#include "cpgen/params_wgmma.cuh"
#include "cpgen/traits.cuh"

namespace cpgen {
namespace device {

// Plain constexpr arithmetic so the CPU tests can evaluate it for any config.
struct WgmmaFwdLayout {
  int threads;
  int swizzle_bytes;  // W: bytes of a column block's row, one swizzle line
  int column_blocks;  // W-byte column blocks of a head_dim row
  int q_tile_bytes, kv_tile_bytes;
  int q_offset, k_offset, v_offset, barrier_offset;  // from the aligned base
  int shared_bytes;                                  // what the launch asks for, slack included
};

constexpr int kWgmmaAlignSlack = 1024;

// Registers per thread after setmaxnreg (see WgmmaFwdTraits): the producer warpgroup drops to the
// first, the consumers grow to the second. setmaxnreg.inc blocks until the CTA's pool (what ptxas
// allocated per thread, times the threads) has the registers, so the plan must fit that pool.
// A persistent kernel's producer warpgroup runs two threads with work (the loader, and the
// scheduler that hands the work items over, step_fwd_wgmma.cuh), which spilled 32 bytes in 24
// registers (ptxas of NVRTC 13.0): it gets 32, and its consumers 232, which they fit without
// spilling; the plan stays within the CTA's 168 per thread at two consumer warpgroups.
// Three consumer warpgroups (512 threads) start at 128 registers each, the whole 64K file: the
// producer drops to 24 (persistent: 32) and the consumers grow to 160, 128 x 24 + 384 x 160 =
// 64512 (persistent: 65536). FlashAttention-3 runs head dim 64 this way, 192 query rows a CTA.
constexpr int kWgmmaProducerRegisters = 24;
constexpr int kWgmmaConsumerRegisters = 240;
constexpr int kWgmmaPersistentProducerRegisters = 32;
constexpr int kWgmmaPersistentConsumerRegisters = 232;
constexpr int kWgmmaThreeConsumerRegisters = 160;
CPGEN_HOST_DEVICE constexpr int wgmma_producer_registers(bool persistent) {
  return persistent ? kWgmmaPersistentProducerRegisters : kWgmmaProducerRegisters;
}
CPGEN_HOST_DEVICE constexpr int wgmma_consumer_registers(int consumers, bool persistent) {
  return consumers == 3 ? kWgmmaThreeConsumerRegisters
                        : persistent ? kWgmmaPersistentConsumerRegisters : kWgmmaConsumerRegisters;
}
CPGEN_HOST_DEVICE constexpr int wgmma_register_plan(int consumers, bool persistent = false) {
  return 128 * wgmma_producer_registers(persistent) + 128 * consumers * wgmma_consumer_registers(consumers, persistent);
}

// S and O of one 64-row wgmma tile per consumer thread, fp32. 168 admits head dim 256 with 80-key
// tiles (40 + 128; FlashAttention-3's tile there; no spills in any variant, NVRTC 13.0); beyond
// it the consumer's 240 registers leave too little for P, the row statistics and addresses.
// Three consumers have 160 registers: 96 admits head dim 64 with 128-key tiles (64 + 32),
// FlashAttention-3's tile there. The generator's feasibility check (generator/kernel_spec_wgmma.cpp)
// reads this and wgmma_fwd_layout, so the two cannot drift; ptxas's spill report has the last
// word (the tuner prunes a candidate that spills).
constexpr int kWgmmaAccumulatorBudget = 168;
constexpr int kWgmmaThreeConsumerAccumulatorBudget = 96;
CPGEN_HOST_DEVICE constexpr int wgmma_accumulator_budget(int consumers) {
  return consumers == 3 ? kWgmmaThreeConsumerAccumulatorBudget : kWgmmaAccumulatorBudget;
}

CPGEN_HOST_DEVICE constexpr WgmmaFwdLayout wgmma_fwd_layout(int head_dim, int block_m, int block_n, int consumers,
                                                            int stages, bool persistent = false) {
  WgmmaFwdLayout l{};
  l.threads = 128 * (1 + consumers);
  l.swizzle_bytes = wgmma_swizzle_bytes(head_dim);
  l.column_blocks = head_dim * 2 / l.swizzle_bytes;
  l.q_tile_bytes = block_m * head_dim * 2;
  l.kv_tile_bytes = block_n * head_dim * 2;
  l.q_offset = 0;
  l.k_offset = l.q_offset + l.q_tile_bytes;
  l.v_offset = l.k_offset + stages * l.kv_tile_bytes;
  l.barrier_offset = l.v_offset + stages * l.kv_tile_bytes;
  const int barrier_bytes = 8 * (2 + 4 * stages) + (persistent ? 8 * 4 + 4 * 2 : 0);
  l.shared_bytes = kWgmmaAlignSlack + l.barrier_offset + (barrier_bytes + 127) / 128 * 128;
  return l;
}

// kKeyIntervalsV and kSoftcapV are the mask features of FwdTraits (traits.cuh), with the same
// meaning: per-query key intervals (q_key_first/q_key_last) and a logit softcap. kPingPongV: the
// two consumer warpgroups take turns issuing their MMAs (step_fwd_wgmma.cuh). kPersistentV: about
// one CTA per SM, each looping over query blocks (layout.cuh, persistent_item).
template <typename ElementT, int kHeadDimV, int kBlockMV, int kBlockNV, int kConsumersV, int kStagesV, bool kCausalV,
          int kGroupV, bool kKeyIntervalsV = false, bool kSoftcapV = false, bool kPingPongV = false,
          bool kPersistentV = false>
struct WgmmaFwdTraits {
  using Element = ElementT;
  static constexpr int kHeadDim = kHeadDimV;
  static constexpr int kBlockM = kBlockMV;  // packed query rows per CTA
  static constexpr int kBlockN = kBlockNV;  // keys per K/V tile (the N of S = Q K^T)
  static constexpr int kConsumers = kConsumersV;
  static constexpr int kStages = kStagesV;  // K/V tiles in the shared ring
  static constexpr bool kCausal = kCausalV;
  static constexpr int kGroup = kGroupV;
  static constexpr bool kKeyIntervals = kKeyIntervalsV;
  static constexpr bool kSoftcap = kSoftcapV;
  static constexpr bool kPingPong = kPingPongV;
  static constexpr bool kPersistent = kPersistentV;
  // The block's key range by the runs' search (mask.cuh count_at_or_before_in_runs): two to five
  // rounds of loads at each CTA's (or item's) start instead of a binary search's 28.
  static constexpr bool kProbeKeyRuns = true;
  // The CTA barriers of the ping-pong turns: consumer c waits for its turn at kTurnBarrier + c (0
  // is __syncthreads'), and each phase counts both consumer warpgroups.
  static constexpr int kTurnBarrier = 1;
  static constexpr int kTurnThreads = 128 * kConsumers;  // both consumer warpgroups (ping-pong: two)
  static constexpr WgmmaFwdLayout kLayout =
      wgmma_fwd_layout(kHeadDim, kBlockM, kBlockN, kConsumers, kStages, kPersistent);

  static constexpr int kThreads = kLayout.threads;
  static constexpr int kColumnBlocks = kLayout.column_blocks;
  static constexpr int kSwizzleBytes = kLayout.swizzle_bytes;      // W
  static constexpr int kColumnElements = kSwizzleBytes / 2;        // C
  static constexpr int kKStepsPerBlock = kSwizzleBytes / 32;       // k16 steps (32 bytes) per line
  static constexpr unsigned kDescriptorSwizzle = kSwizzleBytes == 128 ? kWgmmaSwizzle128B : kWgmmaSwizzle64B;
  static constexpr int kQTileBytes = kLayout.q_tile_bytes;
  static constexpr int kKvTileBytes = kLayout.kv_tile_bytes;
  static constexpr int kQOffset = kLayout.q_offset;
  static constexpr int kKOffset = kLayout.k_offset;
  static constexpr int kVOffset = kLayout.v_offset;
  static constexpr int kBarrierOffset = kLayout.barrier_offset;
  static constexpr int kSharedBytes = kLayout.shared_bytes;
  static constexpr int kQkSteps = kHeadDim / 16;         // k16 steps of S = Q K^T
  static constexpr int kPvSteps = kBlockN / 16;          // k16 steps of O += P V
  static constexpr int kScoreRegisters = kBlockN / 2;    // S of 64 x kBlockN over 128 threads
  static constexpr int kOutputRegisters = kHeadDim / 2;  // O of 64 x kHeadDim

  // Registers per thread after setmaxnreg. The CTA starts with what ptxas allocated per thread
  // under __launch_bounds__(threads, 1): 168 at 384 threads (64K split evenly, rounded to 8),
  // 232 at 256 (measured). The producer keeps what a loop of TMA issues needs and the consumers
  // grow to 240; the sum stays within the CTA's allocation (128 x 24 + 256 x 240 = 64512 =
  // 384 x 168 with two consumer warpgroups, 33792 <= 256 x 232 with one; with three, 128 at 512
  // threads and consumers of 160, above), and .inc never asks for fewer registers than a
  // consumer already has. compile_kernel refuses a kernel for which
  // either fails (wgmma_register_plan_problem, runtime/jit/jit.h).
  static constexpr int kProducerRegisters = wgmma_producer_registers(kPersistent);
  static constexpr int kConsumerRegisters = wgmma_consumer_registers(kConsumers, kPersistent);

  static_assert(Element::kBytes == 2, "inputs are 16-bit (bf16 or fp16)");
  static_assert(kHeadDim == 64 || kHeadDim == 96 || kHeadDim == 128 || kHeadDim == 256,
                "head dim 64, 96, 128 or 256: whole swizzled column blocks of 64 (96: 32) elements");
  static_assert(kConsumers >= 1 && kConsumers <= 3, "one to three consumer warpgroups");
  static_assert(!kPingPong || kConsumers == 2, "ping-pong alternates two consumer warpgroups");
  static_assert(kBlockM == 64 * kConsumers, "each consumer warpgroup owns the 64 rows of one wgmma m64");
  // 176 is the widest S that leaves O of head dim 128 inside the budget (88 + 64 registers): a
  // third fewer softmax rounds and barrier waits per key than 128, for the unmasked steps that
  // make up most of a ring; 80 the widest at head dim 256 (40 + 128), a quarter more keys per
  // round than 64. Each N needs its inline PTX (hopper.cuh, CPGEN_WG_DEFINE).
  static_assert(kBlockN == 64 || kBlockN == 80 || kBlockN == 128 || kBlockN == 176,
                "block_n (the wgmma N of S) is 64, 80, 128 or 176");
  static_assert(kBlockN <= 256 && kBlockN / kGroup <= 256, "a TMA box dimension is at most 256");
  // Every column block starts on a whole swizzle atom (8 lines of W bytes), where both TMA's
  // writes and wgmma's descriptors (base offset 0) put the pattern's origin.
  static_assert(kQTileBytes % (8 * kSwizzleBytes) == 0 && kKvTileBytes % (8 * kSwizzleBytes) == 0 &&
                    (kBlockN * kSwizzleBytes) % (8 * kSwizzleBytes) == 0 &&
                    (kBlockM * kSwizzleBytes) % (8 * kSwizzleBytes) == 0,
                "column blocks must start on whole swizzle atoms");
  // The S of tile t + 1 waits for its stage to fill before the stage of tile t is released.
  static_assert(kStages >= 2 && kStages <= 4, "2 to 4 K/V stages");
  static_assert(kGroup == 1 || kGroup == 2 || kGroup == 4 || kGroup == 8 || kGroup == 16, "GQA group 1, 2, 4, 8 or 16");
  static_assert(kBlockM % kGroup == 0, "block_m must hold whole GQA groups");
  static constexpr int kAccumulatorBudget = wgmma_accumulator_budget(kConsumers);
  static_assert(kScoreRegisters + kOutputRegisters <= kAccumulatorBudget, "S and O accumulators must fit in registers");
#if defined(__CUDA_ARCH__)
  static_assert(kSharedBytes <= shared_limit_for_arch(__CUDA_ARCH__),
                "shared memory (Q tile + stages x K/V tiles) exceeds the arch's per-block limit");
#endif
};

}  // namespace device
}  // namespace cpgen
