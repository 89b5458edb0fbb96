// Every constant of the backward step kernel (step_bwd.cuh), derived from the spec's parameters in
// one place and checked with static_assert. generator/kernel_spec.cpp's check_feasibility judges
// a spec with the same bwd_layout and budget.
#pragma once

#include "cpgen/traits.cuh"

namespace cpgen {
namespace device {

// Same budget and reasoning as the forward's kAccumulatorBudget: the fp32 accumulators a warp
// holds across a query tile (S^T and dP^T of its keys against block_m queries, dK and dV of its
// keys over its head-dim slice) must leave room for fragments and addresses in 255 registers.
constexpr int kBwdAccumulatorBudget = 160;

// Every derived size of a backward step config, as plain constexpr arithmetic (the CPU tests
// evaluate it for any config; BwdTraits adds the static_asserts).
//
// Warps are laid out key_groups x dim_splits: a warp owns key_rows_per_warp keys of the CTA's
// block_n (the M side of S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q) and, when there
// are more warps than 16-key slices, 1 / dim_splits of the head dim of dK and dV. Warps of the
// same key slice recompute the same S^T and dP^T; that duplicated work buys registers at head dim
// 128 and 256 without a shared-memory round trip of P.
struct BwdLayout {
  int threads;
  int key_groups, dim_splits;
  int key_rows_per_warp, key_m_tiles;  // keys per warp, in 16-row MMA tiles
  int dim_cols_per_warp, dim_tiles;    // head-dim columns of dK/dV per warp, in n8 tiles
  int query_tiles;                     // n8 tiles of S^T per key m-tile (block_m / 8)
  int accumulator_registers;
  int chunks_per_row;
  int kv_tile_bytes, q_tile_bytes;
  int k_offset, v_offset, q_offset, do_offset, ds_offset, rows_offset;
  int ds_pitch;  // elements per dS^T row (one key): block_m + 8, 16 bytes against bank conflicts
  int shared_bytes;
  int kv_loads_per_thread, q_loads_per_thread;
};

CPGEN_HOST_DEVICE constexpr int min_int(int a, int b) { return a < b ? a : b; }

// key_intervals: the per-row table holds each query row's visible key interval (first and last
// key position) in place of its position, 4 more bytes per row (step_bwd.cuh).
CPGEN_HOST_DEVICE constexpr BwdLayout bwd_layout(int element_bytes, int head_dim, int block_m,
                                                 int block_n, int warps, int stages,
                                                 bool key_intervals = false) {
  BwdLayout l{};
  l.threads = warps * 32;
  l.key_groups = min_int(warps, block_n / 16);
  l.dim_splits = l.key_groups > 0 ? warps / l.key_groups : 1;
  l.key_rows_per_warp = l.key_groups > 0 ? block_n / l.key_groups : 0;
  l.key_m_tiles = l.key_rows_per_warp / 16;
  l.dim_cols_per_warp = head_dim / l.dim_splits;
  l.dim_tiles = l.dim_cols_per_warp / 8;
  l.query_tiles = block_m / 8;
  l.accumulator_registers = l.key_m_tiles * (2 * l.query_tiles + 2 * l.dim_tiles) * 4;
  l.chunks_per_row = head_dim * element_bytes / 16;
  l.kv_tile_bytes = block_n * head_dim * element_bytes;
  l.q_tile_bytes = block_m * head_dim * element_bytes;
  l.k_offset = 0;
  l.v_offset = l.kv_tile_bytes;
  l.q_offset = 2 * l.kv_tile_bytes;
  l.do_offset = l.q_offset + stages * l.q_tile_bytes;
  l.ds_offset = l.do_offset + stages * l.q_tile_bytes;
  l.ds_pitch = block_m + 8;
  l.rows_offset = l.ds_offset + block_n * l.ds_pitch * element_bytes;
  // lse (log2), delta, and the position (or the key interval) per query row.
  l.shared_bytes = l.rows_offset + block_m * (key_intervals ? 16 : 12);
  l.kv_loads_per_thread = (block_n * l.chunks_per_row + l.threads - 1) / l.threads;
  l.q_loads_per_thread = (block_m * l.chunks_per_row + l.threads - 1) / l.threads;
  return l;
}

template <typename ElementT, int kHeadDimV, int kBlockMV, int kBlockNV, int kWarpsV, int kStagesV,
          bool kCausalV, int kGroupV, bool kKeyIntervalsV = false, bool kSoftcapV = false>
struct BwdTraits {
  using Element = ElementT;
  static constexpr int kHeadDim = kHeadDimV;
  static constexpr int kBlockM = kBlockMV;  // packed query rows per inner iteration
  static constexpr int kBlockN = kBlockNV;  // keys per CTA
  static constexpr int kWarps = kWarpsV;
  static constexpr int kStages = kStagesV;  // Q/dO tiles in flight
  static constexpr bool kCausal = kCausalV;
  static constexpr int kGroup = kGroupV;
  // Mask features (generator/kernel_spec.h): per-query key intervals from params.q_key_first /
  // q_key_last (causal, windows and documents alike), and the logit softcap params.softcap.
  static constexpr bool kKeyIntervals = kKeyIntervalsV;
  static constexpr bool kSoftcap = kSoftcapV;
  static constexpr int kElementBytes = Element::kBytes;
  static constexpr BwdLayout kLayout =
      bwd_layout(kElementBytes, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kKeyIntervals);

  static constexpr int kThreads = kLayout.threads;
  static constexpr int kKeyGroups = kLayout.key_groups;
  static constexpr int kDimSplits = kLayout.dim_splits;
  static constexpr int kKeyRowsPerWarp = kLayout.key_rows_per_warp;
  static constexpr int kKeyMTiles = kLayout.key_m_tiles;
  static constexpr int kDimColsPerWarp = kLayout.dim_cols_per_warp;
  static constexpr int kDimTiles = kLayout.dim_tiles;
  static constexpr int kQueryTiles = kLayout.query_tiles;
  static constexpr int kQkSteps = kHeadDim / 16;  // k16 steps of K Q^T and V dO^T
  static constexpr int kQuerySteps = kBlockM / 16;  // k16 steps of P^T dO and dS^T Q
  static constexpr int kKeySteps = kBlockN / 16;    // k16 steps of dS K
  // dQ = dS K is computed in items of 16 query rows x 32 head-dim columns, dealt round-robin to
  // the warps after dS has gone through shared memory.
  static constexpr int kDqCols = 32;
  static constexpr int kDqItems = (kBlockM / 16) * (kHeadDim / kDqCols);
  static constexpr int kAccumulatorRegisters = kLayout.accumulator_registers;

  static constexpr int kChunksPerRow = kLayout.chunks_per_row;
  static constexpr int kKvTileBytes = kLayout.kv_tile_bytes;
  static constexpr int kQTileBytes = kLayout.q_tile_bytes;
  static constexpr int kKOffset = kLayout.k_offset;
  static constexpr int kVOffset = kLayout.v_offset;
  static constexpr int kQOffset = kLayout.q_offset;
  static constexpr int kDoOffset = kLayout.do_offset;
  static constexpr int kDsOffset = kLayout.ds_offset;
  static constexpr int kDsPitch = kLayout.ds_pitch;
  static constexpr int kRowsOffset = kLayout.rows_offset;
  static constexpr int kSharedBytes = kLayout.shared_bytes;
  static constexpr int kKvLoadsPerThread = kLayout.kv_loads_per_thread;
  static constexpr int kQLoadsPerThread = kLayout.q_loads_per_thread;

  static_assert(kElementBytes == 2, "inputs are 16-bit (bf16 or fp16)");
  static_assert(kHeadDim % 32 == 0, "head_dim must be a multiple of 32 (dQ column items)");
  static_assert(kChunksPerRow % 8 == 0 || kChunksPerRow == 12,
                "the shared-memory swizzle covers 8k or 12 chunks of 16 bytes per row");
  static_assert(kBlockN % 16 == 0 && kBlockM % 16 == 0, "tiles are whole 16-row MMA tiles");
  static_assert(kWarps % kKeyGroups == 0 && (kBlockN / 16) % kKeyGroups == 0,
                "warps split the keys into equal 16-row slices");
  static_assert(kHeadDim % (16 * kDimSplits) == 0,
                "each warp's dK/dV columns are whole pairs of n8 tiles");
  static_assert(kBlockM % kGroup == 0, "block_m must hold whole GQA groups");
  static_assert(kStages >= 1 && kStages <= 2, "1 or 2 Q/dO pipeline stages");
  static_assert(kThreads <= 1024, "at most 1024 threads per CTA");
  static_assert(kAccumulatorRegisters <= kBwdAccumulatorBudget,
                "the fp32 S^T, dP^T, dK and dV accumulators of a warp do not fit in registers");
#if defined(__CUDA_ARCH__)
  static_assert(kSharedBytes <= shared_limit_for_arch(__CUDA_ARCH__),
                "shared memory (K, V, stages x Q/dO, dS^T) exceeds the arch's per-block limit");
#endif
};

}  // namespace device
}  // namespace cpgen
