// Every constant of the forward step kernel, derived from the spec's parameters in one place and
// checked with static_assert, so that an infeasible config fails to compile (and the tuner records
// it as such) instead of running wrong. generator/kernel_spec.cpp's check_feasibility mirrors
// kSharedBytes; the CPU tests compare the two.
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

// Per-block opt-in dynamic shared memory: 163 KB on sm_80 (A100), 227 KB on sm_90 (H100/H200).
constexpr int shared_limit_for_arch(int arch) { return arch >= 900 ? 232448 : 166912; }

template <typename ElementT, int kHeadDimV, int kBlockMV, int kBlockNV, int kWarpsV, int kStagesV,
          bool kCausalV, int kGroupV>
struct FwdTraits {
  using Element = ElementT;
  static constexpr int kHeadDim = kHeadDimV;
  static constexpr int kBlockM = kBlockMV;  // packed query rows per CTA
  static constexpr int kBlockN = kBlockNV;  // keys per K/V tile
  static constexpr int kWarps = kWarpsV;
  static constexpr int kStages = kStagesV;  // K/V tiles in flight (cp.async pipeline depth)
  static constexpr bool kCausal = kCausalV;
  static constexpr int kGroup = kGroupV;    // query heads per kv head, packed into the rows
  static constexpr int kElementBytes = Element::kBytes;

  static constexpr int kThreads = kWarps * 32;
  // Each warp owns kRowsPerWarp consecutive packed rows = kMTiles MMA tiles of 16 rows, and
  // computes them against every key of a tile (warps never exchange scores).
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;
  static constexpr int kScoreTiles = kBlockN / 8;    // n8 tiles of S = Q K^T per m-tile
  static constexpr int kOutputTiles = kHeadDim / 8;  // n8 tiles of O per m-tile
  static constexpr int kQkSteps = kHeadDim / 16;     // k16 steps of Q K^T
  static constexpr int kPvSteps = kBlockN / 16;      // k16 steps of P V

  // fp32 accumulator registers per thread (the dominant register cost).
  static constexpr int kAccumulatorRegisters = kMTiles * (kScoreTiles + kOutputTiles) * 4;

  // Shared memory: the Q tile (loaded once, re-read per k-step with ldmatrix) and kStages K and V
  // tiles, each a swizzled [rows][head_dim] array (layout.cuh).
  static constexpr int kChunksPerRow = kHeadDim * kElementBytes / 16;
  static constexpr int kQTileBytes = kBlockM * kHeadDim * kElementBytes;
  static constexpr int kKvTileBytes = kBlockN * kHeadDim * kElementBytes;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQTileBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKvTileBytes;
  static constexpr int kSharedBytes = kVOffset + kStages * kKvTileBytes;

  // 16-byte cp.async chunks each thread issues per Q tile and per K (or V) tile.
  static constexpr int kQChunks = kBlockM * kChunksPerRow;
  static constexpr int kKvChunks = kBlockN * kChunksPerRow;
  static constexpr int kQLoadsPerThread = (kQChunks + kThreads - 1) / kThreads;
  static constexpr int kKvLoadsPerThread = (kKvChunks + kThreads - 1) / kThreads;

  static_assert(kElementBytes == 2, "inputs are 16-bit (bf16 or fp16)");
  static_assert(kHeadDim % 16 == 0, "head_dim must be a multiple of the MMA k (16)");
  static_assert(kChunksPerRow % 8 == 0 || kChunksPerRow == 12,
                "the shared-memory swizzle covers 8k or 12 chunks of 16 bytes per row");
  static_assert(kBlockN % 16 == 0, "block_n must be a multiple of 16 (P V k-steps, paired n8 tiles)");
  static_assert(kBlockM % (16 * kWarps) == 0, "each warp computes whole 16-row MMA tiles");
  static_assert(kMTiles >= 1 && kMTiles <= 4, "1 to 4 MMA row tiles per warp");
  static_assert(kBlockM % kGroup == 0, "block_m must hold whole GQA groups");
  static_assert(kStages >= 1 && kStages <= 4, "1 to 4 pipeline stages");
  static_assert(kThreads <= 1024, "at most 1024 threads per CTA");
  // Beyond ~200 accumulator registers per thread the live fragments no longer fit in 255.
  static_assert(kAccumulatorRegisters <= 192, "fp32 accumulators do not fit in registers");
#if defined(__CUDA_ARCH__)
  static_assert(kSharedBytes <= shared_limit_for_arch(__CUDA_ARCH__),
                "shared memory (Q tile + stages x K/V tiles) exceeds the arch's per-block limit");
#endif
};

}  // namespace device
}  // namespace cpgen
