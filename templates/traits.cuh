// Every constant of the forward step kernel, derived from the spec's parameters in one place and
// checked with static_assert, so that an infeasible config fails to compile (and the tuner records
// it as such) instead of running wrong. generator/kernel_spec.cpp's check_feasibility judges a
// spec with the same fwd_layout, so the two cannot disagree.
#pragma once

#include "cpgen/platform.cuh"

namespace cpgen {
namespace device {

// Element type tags of the 16-bit inputs (mma.cuh specializes the conversions and MMAs on them).
struct Bf16 {
  static constexpr int kBytes = 2;
};
struct Fp16 {
  static constexpr int kBytes = 2;
};

// Per-block opt-in dynamic shared memory by __CUDA_ARCH__ (generator/kernel_spec.cpp
// shared_memory_limit reads it for an arch name): 163 KB on sm_80 (and sm_87), 99 KB on sm_86, sm_89
// and sm_120, 227 KB on sm_90 and sm_100.
constexpr int shared_limit_for_arch(int arch) {
  return arch >= 1200 ? 101376 : arch >= 900 ? 232448 : (arch == 800 || arch == 870) ? 166912 : 101376;
}

// fp32 accumulators per thread are the dominant register cost: per 16-row MMA tile of a warp,
// 4 per n8 tile of the output (head_dim / 8) and of the scores (keys / 8). A K/V tile whose keys
// all fit the whole-tile budget (kAccumulatorBudget, at most kMaxSubKeys keys) is scored at once;
// otherwise in sub-tiles of the largest of min(block_n, 64), 32, 16 keys that fit the smaller
// kSubTileAccumulatorBudget, which leaves the sub-tile loop its registers.
//
// At 32 rows per warp and head dim 128 (the default) a 64-key tile is scored whole
// (2 x (16 + 8) x 4 = 192), as FlashAttention-2 runs the same tile: scoring it as two 32-key
// halves reads the warp's Q fragments from shared memory twice per tile, 20% more shared-memory
// traffic (96 ldmatrix.x4 per warp and tile against 80), which bounds this kernel on Hopper.
// The limits come from ptxas (NVRTC 13.0, every candidate of compile --all on sm_80, sm_86,
// sm_90a and sm_120): at 192
// - 128 keys at once (head dim 64, 128-key tiles) spilled 104 bytes on sm_80: whole tiles stop
//   at 64 keys;
// - two 64-key sub-tiles (head dim 128, 128-key tiles) spilled 20 bytes on sm_80: sub-tiles get
//   160;
// - the softcap variant (its tanh constants) spilled 88-140 bytes on sm_80 and sm_90: it gets
//   160 throughout (32-key halves at head dim 128).
constexpr int kAccumulatorBudget = 192;
constexpr int kSubTileAccumulatorBudget = 160;
constexpr int kMaxSubKeys = 64;

// Every derived size of a forward step config, as plain constexpr arithmetic so that the CPU
// tests can evaluate it for any config (FwdTraits below adds the static_asserts).
struct FwdLayout {
  int threads;
  int rows_per_warp;
  int m_tiles;              // 16-row MMA tiles per warp
  int sub_keys;             // keys scored at once
  int accumulator_registers;
  int accumulator_budget;   // the budget sub_keys was chosen within
  int chunks_per_row;       // 16-byte chunks per tile row
  int q_tile_bytes, kv_tile_bytes;
  int q_offset, k_offset, v_offset;  // of the Q tile and the first K and V stages
  int shared_bytes;
  int q_loads_per_thread, kv_loads_per_thread;  // 16-byte cp.async per thread per tile
};

CPGEN_HOST_DEVICE constexpr int fwd_accumulators(int m_tiles, int head_dim, int keys) {
  return m_tiles * (head_dim / 8 + keys / 8) * 4;
}

CPGEN_HOST_DEVICE constexpr FwdLayout fwd_layout(int element_bytes, int head_dim, int block_m,
                                                 int block_n, int warps, int stages,
                                                 bool softcap = false) {
  FwdLayout l{};
  l.threads = warps * 32;
  l.rows_per_warp = block_m / warps;
  l.m_tiles = l.rows_per_warp / 16;
  const int widest = block_n < kMaxSubKeys ? block_n : kMaxSubKeys;
  const bool whole = !softcap && widest == block_n &&
                     fwd_accumulators(l.m_tiles, head_dim, block_n) <= kAccumulatorBudget;
  l.accumulator_budget = whole ? kAccumulatorBudget : kSubTileAccumulatorBudget;
  l.sub_keys = whole || fwd_accumulators(l.m_tiles, head_dim, widest) <= l.accumulator_budget ? widest
               : fwd_accumulators(l.m_tiles, head_dim, 32) <= l.accumulator_budget && block_n >= 32
                   ? 32
                   : 16;
  l.accumulator_registers = fwd_accumulators(l.m_tiles, head_dim, l.sub_keys);
  l.chunks_per_row = head_dim * element_bytes / 16;
  l.q_tile_bytes = block_m * head_dim * element_bytes;
  l.kv_tile_bytes = block_n * head_dim * element_bytes;
  l.q_offset = 0;
  l.k_offset = l.q_offset + l.q_tile_bytes;
  l.v_offset = l.k_offset + stages * l.kv_tile_bytes;
  l.shared_bytes = l.v_offset + stages * l.kv_tile_bytes;
  l.q_loads_per_thread = (block_m * l.chunks_per_row + l.threads - 1) / l.threads;
  l.kv_loads_per_thread = (block_n * l.chunks_per_row + l.threads - 1) / l.threads;
  return l;
}

template <typename ElementT, int kHeadDimV, int kBlockMV, int kBlockNV, int kWarpsV, int kStagesV,
          bool kCausalV, int kGroupV, bool kKeyIntervalsV = false, bool kSoftcapV = false>
struct FwdTraits {
  using Element = ElementT;
  static constexpr int kHeadDim = kHeadDimV;
  static constexpr int kBlockM = kBlockMV;  // packed query rows per CTA
  static constexpr int kBlockN = kBlockNV;  // keys per K/V tile
  static constexpr int kWarps = kWarpsV;
  static constexpr int kStages = kStagesV;  // K/V tiles in flight (cp.async pipeline depth)
  static constexpr bool kCausal = kCausalV;
  static constexpr int kGroup = kGroupV;  // query heads per kv head, packed into the rows
  // Mask features (generator/kernel_spec.h): per-query key intervals from params.q_key_first /
  // q_key_last (causal, windows and documents alike), and the logit softcap params.softcap.
  static constexpr bool kKeyIntervals = kKeyIntervalsV;
  static constexpr bool kSoftcap = kSoftcapV;
  // The block's key range by plain binary search (mask.cuh): the probes of the runs' search cost
  // this family's causal default (255 registers) 80 bytes of spills on sm_90a.
  static constexpr bool kProbeKeyRuns = false;
  static constexpr int kElementBytes = Element::kBytes;
  static constexpr FwdLayout kLayout =
      fwd_layout(kElementBytes, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kSoftcap);

  static constexpr int kThreads = kLayout.threads;
  // Each warp owns kRowsPerWarp consecutive packed rows = kMTiles MMA tiles of 16 rows, and
  // computes them against every key of a tile (warps never exchange scores).
  static constexpr int kRowsPerWarp = kLayout.rows_per_warp;
  static constexpr int kMTiles = kLayout.m_tiles;
  static constexpr int kOutputTiles = kHeadDim / 8;  // n8 tiles of O per m-tile
  static constexpr int kQkSteps = kHeadDim / 16;     // k16 steps of Q K^T
  static constexpr int kSubKeys = kLayout.sub_keys;
  static constexpr int kSubTiles = kBlockN / kSubKeys;
  static constexpr int kScoreTiles = kSubKeys / 8;  // n8 tiles of S = Q K^T per m-tile
  static constexpr int kPvSteps = kSubKeys / 16;    // k16 steps of P V
  static constexpr int kAccumulatorRegisters = kLayout.accumulator_registers;

  // Shared memory: the Q tile (loaded once, re-read per k-step with ldmatrix) and kStages K and V
  // tiles, each a swizzled [rows][head_dim] array (layout.cuh).
  static constexpr int kChunksPerRow = kLayout.chunks_per_row;
  static constexpr int kQTileBytes = kLayout.q_tile_bytes;
  static constexpr int kKvTileBytes = kLayout.kv_tile_bytes;
  static constexpr int kQOffset = kLayout.q_offset;
  static constexpr int kKOffset = kLayout.k_offset;
  static constexpr int kVOffset = kLayout.v_offset;
  static constexpr int kSharedBytes = kLayout.shared_bytes;
  static constexpr int kQLoadsPerThread = kLayout.q_loads_per_thread;
  static constexpr int kKvLoadsPerThread = kLayout.kv_loads_per_thread;

  static_assert(kElementBytes == 2, "inputs are 16-bit (bf16 or fp16)");
  static_assert(kHeadDim % 16 == 0, "head_dim must be a multiple of the MMA k (16)");
  static_assert(kChunksPerRow % 8 == 0 || kChunksPerRow == 12,
                "the shared-memory swizzle covers 8k or 12 chunks of 16 bytes per row");
  static_assert(kBlockN % 16 == 0, "block_n must be a multiple of 16 (P V k-steps, paired n8 tiles)");
  static_assert(kBlockM % (16 * kWarps) == 0, "each warp computes whole 16-row MMA tiles");
  static_assert(kBlockN % kSubKeys == 0 && kSubKeys % 16 == 0, "key sub-tiles split the tile");
  static_assert(kBlockM % kGroup == 0, "block_m must hold whole GQA groups");
  static_assert(kStages >= 1 && kStages <= 4, "1 to 4 pipeline stages");
  static_assert(kThreads <= 1024, "at most 1024 threads per CTA");
  static_assert(kAccumulatorRegisters <= kLayout.accumulator_budget,
                "the fp32 output accumulator (rows per warp x head_dim / 32) does not fit in registers");
#if defined(__CUDA_ARCH__)
  static_assert(kSharedBytes <= shared_limit_for_arch(__CUDA_ARCH__),
                "shared memory (Q tile + stages x K/V tiles) exceeds the arch's per-block limit");
#endif
};

}  // namespace device
}  // namespace cpgen
