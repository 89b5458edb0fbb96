// The forward ring-step kernel: attention of one rank's local queries against the K/V chunk it
// holds in this ring step, merged into the running state (params.cuh).
//
// Grid: (ceil(q_len * group / kBlockM), y, z) where y * z covers the batch * kv_heads pairs,
// folded by fold_pairs (layout.cuh) to keep y and z within 65535. A CTA owns kBlockM packed query rows
// of one kv head (all the group's query heads, layout.cuh), so every K/V tile it streams through
// shared memory serves the whole group. Per key tile:
//   S = Q K^T            mma.sync m16n8k16, Q and K fragments by ldmatrix from swizzled tiles
//   softcap (kSoftcap)   s = c tanh(scale q.k / c), before the mask
//   mask                 only on tiles that straddle the causal diagonal (or, with kKeyIntervals,
//                        a row's key interval) or the end of the chunk
//   online softmax       log2 domain, one FMA + exp2 per score (softmax.cuh)
//   O = O * rescale + P V   P repacked to the input type in registers, V by ldmatrix.trans
// K/V tiles arrive through a kStages-deep cp.async pipeline; the Q tile stays in shared memory.
// With kKeyIntervals the keys a block runs are a window [begin, end) of the chunk's tiles
// (mask.cuh, interval_key_tiles), so tiles before and after it are never loaded. A block that
// sees no key of the chunk loads nothing: a middle step leaves its state as it is, the first
// step writes the empty state and the last one finalizes the state it has.
//
// Requirements on the launch beyond params.cuh: q, k, v and out 16-byte aligned and every
// element stride of them a multiple of 8 (rows move as 16-byte cp.async chunks), o_state 8-byte
// aligned; dynamic shared memory = FwdTraits::kSharedBytes; block = kWarps * 32 threads.
#pragma once

#include "cpgen/global_access.cuh"
#include "cpgen/layout.cuh"
#include "cpgen/mask.cuh"
#include "cpgen/mma.cuh"
#include "cpgen/params.cuh"
#include "cpgen/softmax.cuh"
#include "cpgen/traits.cuh"

namespace cpgen {
namespace device {

// Two adjacent fp32 state columns, moved as one 8-byte access (o_state rows are 8-byte aligned).
struct alignas(8) FloatPair {
  float x, y;
};

// Where packed row `packed` of a (batch, kv head) pair keeps its running state (its row of m_state,
// l_state and lse; o_state from state * head_dim) and where its output row starts (elements of
// out). Both forward families load and store the state through it.
struct RowPlace {
  long long state;
  long long out;
};
template <int kGroup>
CPGEN_DEVICE RowPlace row_place(const RingFwdParams& params, int batch, int kv_head, int packed) {
  const PackedRow pr = unpack_row(packed, kGroup);
  const int head = kv_head * kGroup + pr.head_in_group;
  return {state_row(batch, params.q_heads, head, state_pitch(params.state_len, params.q_len), pr.query_index),
          batch * params.out_batch_stride + head * params.out_head_stride +
              static_cast<long long>(pr.query_index) * params.out_row_stride};
}

// Where a CTA works: grid.x enumerates blocks of kBlockM packed rows (query_block: the last one
// first), (grid.y, grid.z) the (batch, kv head) pairs, folded (layout.cuh); pair = batch *
// kv_heads + kv head.
struct BlockCoord {
  int batch;
  int kv_head;
  int first_packed;  // first packed query row of the block
};
CPGEN_DEVICE BlockCoord block_coord(int m_block, int kv_heads, int block_m) {
  const BatchHead at = unfold_batch_head(blockIdx.y, blockIdx.z, gridDim.y, kv_heads);
  return {at.batch, at.kv_head, m_block * block_m};
}
// This CTA's (batch, kv head) pair. Problem validation keeps batch * kv_heads below 2^31.
CPGEN_DEVICE int block_pair() {
  return static_cast<int>(unfold_pair(blockIdx.y, blockIdx.z, gridDim.y));
}
// This CTA's query block, the longest first (layout.cuh, heavy_first_block). Both forward
// families take it from here.
CPGEN_DEVICE int query_block() {
  return heavy_first_block(static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}

// Issues this thread's cp.async chunks of one K or V tile (kBlockN rows of head_dim, keys from
// key0) into a swizzled shared tile; keys past kv_len are zero-filled.
//
// Every address here is a function of the thread and block indices that is the same for every
// tile. Left visible, the compiler hoists them all out of the tile loop and keeps them live across
// it (about 60 registers at 128 x 64 tiles, which spilled); taking the indices through opaque()
// makes it recompute them per tile, so what it recomputes must be cheap. Where a pass of the CTA
// covers whole rows (kThreads a multiple of the row's chunks: every head dim but 96), a thread
// copies one chunk column of rows row0, row0 + P, row0 + 2P, ..., so its addresses are one base
// stepped by P rows, and a whole tile (every tile but a chunk's last) needs no row bound. The
// CTA's K and V (kv_source) come from the block indices without a division on the launchers'
// grid (unfold_batch_head). At head dim 128 (128 x 64 tiles) the copy of a whole tile went from
// about 370 instructions per warp (a division, 64-bit products and a bound per row) to about 125,
// of a tile loop of about 1200 (SASS of NVRTC 13.0, sm_90); no register or spill changed on sm_80,
// sm_86, sm_90 or sm_120. Holding the two pointers across the loop saves 25 more but spills on
// sm_120.
struct KvSource {
  const char* k;  // this CTA's (batch, kv head) in K and V
  const char* v;
};
CPGEN_DEVICE KvSource kv_source(const RingFwdParams& params) {
  const BatchHead at = unfold_batch_head(opaque(static_cast<int>(blockIdx.y)), opaque(static_cast<int>(blockIdx.z)),
                                         opaque(static_cast<int>(gridDim.y)), params.kv_heads);
  return {static_cast<const char*>(params.k) + (at.batch * params.k_batch_stride + at.kv_head * params.k_head_stride) * 2,
          static_cast<const char*>(params.v) + (at.batch * params.v_batch_stride + at.kv_head * params.v_head_stride) * 2};
}

// This thread's rows row0, row0 + P, ... of a K/V tile, one chunk column: the sources start at
// row0's and step by P rows. kBounded (a chunk's last tile): rows from keys_left on are zero-filled
// and read (nothing from) the tile's first row, which lies inside the chunk; a whole tile takes no
// bound.
template <typename Traits, bool kBounded>
CPGEN_DEVICE void copy_kv_rows(u32 k_dst, u32 v_dst, const char* k_first, const char* v_first, long long k_row_bytes,
                               long long v_row_bytes, int row0, int chunk, int keys_left) {
  constexpr int kRowsPerPass = Traits::kThreads / Traits::kChunksPerRow;
  constexpr bool kWholePasses = Traits::kBlockN * Traits::kChunksPerRow % Traits::kThreads == 0;
  const char* k_row = k_first + row0 * k_row_bytes;
  const char* v_row = v_first + row0 * v_row_bytes;
#pragma unroll(kBounded ? 1 : Traits::kKvLoadsPerThread)
  for (int i = 0; i < Traits::kKvLoadsPerThread; ++i) {
    const int row = row0 + i * kRowsPerPass;
    if (kWholePasses || row < Traits::kBlockN) {
      const bool valid = !kBounded || row < keys_left;
      const u32 dst = swizzled_offset(row, chunk * 8, Traits::kHeadDim) * 2;
      cp_async_16(k_dst + dst, valid ? k_row : k_first, valid);
      cp_async_16(v_dst + dst, valid ? v_row : v_first, valid);
    }
    k_row += kRowsPerPass * k_row_bytes;
    v_row += kRowsPerPass * v_row_bytes;
  }
}

template <typename Traits>
CPGEN_DEVICE void load_kv_tile_async(const RingFwdParams& params, u32 k_dst, u32 v_dst, int key0) {
  constexpr int kChunksPerRow = Traits::kChunksPerRow;
  constexpr int kChunks = Traits::kBlockN * kChunksPerRow;
  const long long k_row_bytes = params.k_row_stride * 2, v_row_bytes = params.v_row_stride * 2;
  const KvSource source = kv_source(params);
  const char* k_src = source.k;
  const char* v_src = source.v;
  const int keys_left = params.kv_len - key0;
  const unsigned tid = static_cast<unsigned>(opaque(static_cast<int>(threadIdx.x)));
  if constexpr (Traits::kThreads % kChunksPerRow == 0) {
    const int row0 = static_cast<int>(tid / kChunksPerRow);
    const int chunk = static_cast<int>(tid % kChunksPerRow);
    const char* k_first = k_src + key0 * k_row_bytes + chunk * 16;  // the tile's first row
    const char* v_first = v_src + key0 * v_row_bytes + chunk * 16;
    if (keys_left >= Traits::kBlockN)
      copy_kv_rows<Traits, false>(k_dst, v_dst, k_first, v_first, k_row_bytes, v_row_bytes, row0, chunk, keys_left);
    else
      copy_kv_rows<Traits, true>(k_dst, v_dst, k_first, v_first, k_row_bytes, v_row_bytes, row0, chunk, keys_left);
  } else {
#pragma unroll
    for (int i = 0; i < Traits::kKvLoadsPerThread; ++i) {
      const int chunk_id = static_cast<int>(tid) + i * Traits::kThreads;
      if (kChunks % Traits::kThreads == 0 || chunk_id < kChunks) {
        // Consecutive threads take consecutive 16-byte chunks of a row: coalesced global reads.
        const int row = chunk_id / kChunksPerRow;
        const int chunk = chunk_id % kChunksPerRow;
        const bool valid = row < keys_left;
        const long long key = valid ? key0 + row : 0;
        const u32 dst = swizzled_offset(row, chunk * 8, Traits::kHeadDim) * 2;
        cp_async_16(k_dst + dst, k_src + key * k_row_bytes + chunk * 16, valid);
        cp_async_16(v_dst + dst, v_src + key * v_row_bytes + chunk * 16, valid);
      }
    }
  }
}

// The Q tile: packed row r of the block is query head kv_head * group + (first + r) % group at
// query index (first + r) / group; rows past q_len * group are zero-filled.
template <typename Traits>
CPGEN_DEVICE void load_q_tile_async(const RingFwdParams& params, const BlockCoord& at, u32 q_dst,
                                    int tid) {
  constexpr int kChunksPerRow = Traits::kChunksPerRow;
  constexpr int kChunks = Traits::kBlockM * kChunksPerRow;
  const int packed_rows = params.q_len * Traits::kGroup;
  const char* q_src = static_cast<const char*>(params.q) +
                      (at.batch * params.q_batch_stride +
                       static_cast<long long>(at.kv_head) * Traits::kGroup * params.q_head_stride) * 2;
#pragma unroll
  for (int i = 0; i < Traits::kQLoadsPerThread; ++i) {
    const int chunk_id = tid + i * Traits::kThreads;
    if (kChunks % Traits::kThreads == 0 || chunk_id < kChunks) {
      const int row = chunk_id / kChunksPerRow;
      const int chunk = chunk_id % kChunksPerRow;
      const int packed = at.first_packed + row;
      const bool valid = packed < packed_rows;
      const PackedRow pr = unpack_row(valid ? packed : 0, Traits::kGroup);
      const char* src = q_src + (pr.head_in_group * params.q_head_stride +
                                 static_cast<long long>(pr.query_index) * params.q_row_stride) * 2;
      cp_async_16(q_dst + swizzled_offset(row, chunk * 8, Traits::kHeadDim) * 2, src + chunk * 16,
                  valid);
    }
  }
}

// The key tiles one query block runs, in chunk order: [begin, end) are loaded, and of those
// [full_begin, full_end) run without a mask. Empty (begin == end) when the block sees no key.
struct KeyTiles {
  int begin;
  int full_begin;
  int full_end;
  int end;
};

// With key intervals the block's first and last queries bound every row's interval (both ends
// are non-decreasing along the queries); otherwise the causal range of mask.cuh, from tile 0.
// Query block m_block (a persistent kernel's work item), or this CTA's own.
template <typename Traits>
CPGEN_DEVICE KeyTiles block_key_tiles(const RingFwdParams& params, int m_block) {
  const int first_query = block_first_query(m_block, Traits::kBlockM, Traits::kGroup);
  const int last_query = block_last_query(m_block, Traits::kBlockM, Traits::kGroup, params.q_len);
  if constexpr (Traits::kKeyIntervals) {
    const IntervalTiles t = interval_key_tiles(
        params.kv_positions, params.kv_len, load_global(params.q_key_first + first_query),
        load_global(params.q_key_last + first_query), load_global(params.q_key_first + last_query),
        load_global(params.q_key_last + last_query), Traits::kBlockN);
    return {t.begin, t.full_begin, t.full_end, t.end};
  } else {
    int q_first_pos = 0, q_last_pos = 0;
    if (Traits::kCausal) {
      q_first_pos = load_global(params.q_positions + first_query);
      q_last_pos = load_global(params.q_positions + last_query);
    }
    const TileRange range = key_tile_range(params.kv_positions, params.kv_len, q_first_pos, q_last_pos,
                                           Traits::kBlockN, Traits::kCausal, Traits::kProbeKeyRuns);
    return {0, 0, range.full_tiles, range.tiles};
  }
}
template <typename Traits>
CPGEN_DEVICE KeyTiles block_key_tiles(const RingFwdParams& params) {
  return block_key_tiles<Traits>(params, query_block());
}

// The keys [begin, end) of a partly visible tile (keys_here keys from key0) that packed query row
// `packed` sees: under key intervals those in the row's interval, under a causal mask those at or
// before its position. A row past the last (the block's padding) takes the last row's keys; its
// scores are never stored. Both families mask their partial tiles with it.
struct RowKeys {
  int begin;
  int end;
};
template <typename Traits>
CPGEN_DEVICE RowKeys row_tile_keys(const RingFwdParams& params, int key0, int keys_here, int packed) {
  static_assert(Traits::kCausal || Traits::kKeyIntervals, "without a mask every row sees the whole tile");
  const int packed_rows = params.q_len * Traits::kGroup;
  const int query = unpack_row(packed < packed_rows ? packed : packed_rows - 1, Traits::kGroup).query_index;
  const int* positions = params.kv_positions + key0;
  if constexpr (Traits::kKeyIntervals)
    return {key0 + count_before(positions, keys_here, load_global(params.q_key_first + query)),
            key0 + count_at_or_before(positions, keys_here, load_global(params.q_key_last + query))};
  else
    return {key0, key0 + count_at_or_before(positions, keys_here, load_global(params.q_positions + query))};
}

template <typename Traits>
CPGEN_DEVICE void ring_fwd_step(const RingFwdParams& params) {
  using T = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kStages = Traits::kStages;
  constexpr int kGroup = Traits::kGroup;
  constexpr int kMTiles = Traits::kMTiles;
  constexpr int kScoreTiles = Traits::kScoreTiles;
  constexpr int kOutputTiles = Traits::kOutputTiles;
  constexpr bool kCausal = Traits::kCausal;
  constexpr bool kKeyIntervals = Traits::kKeyIntervals;
  constexpr bool kSoftcap = Traits::kSoftcap;
  constexpr int kRowBytes = kHeadDim * 2;
  constexpr int kSubKeys = Traits::kSubKeys;

  extern __shared__ __align__(128) unsigned char shared_storage[];

  // The fold of the pairs over (y, z) leaves up to z - 1 blocks past the last pair.
  if (block_pair() >= params.batch * params.kv_heads) return;

  // Key tiles this query block runs: [begin, end), of which [full_begin, full_end) need no mask.
  // Without key intervals the run starts at tile 0 (begin and full_begin stay compile-time 0).
  const KeyTiles tiles = block_key_tiles<Traits>(params);
  const int tile_count = tiles.end - tiles.begin;
  // A block that sees nothing here has nothing to merge into a middle step's state.
  if (tile_count <= 0 && !params.is_first_step && !params.is_last_step) return;

  // ---- Q tile (once) and the first kStages - 1 K/V tiles --------------------------------------
  const u32 shared_start = shared_address(shared_storage);
  if (tile_count > 0) {
    load_q_tile_async<Traits>(params, block_coord(query_block(), params.kv_heads, kBlockM),
                              shared_start + Traits::kQOffset, threadIdx.x);
  }
  cp_async_commit();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tile_count) {
      load_kv_tile_async<Traits>(params, shared_start + Traits::kKOffset + s * Traits::kKvTileBytes,
                                 shared_start + Traits::kVOffset + s * Traits::kKvTileBytes,
                                 (tiles.begin + s) * kBlockN);
    }
    cp_async_commit();  // empty groups keep the wait counts uniform
  }

  // ---- The running state of this warp's rows, the online softmax's starting point -------------
  // out_acc holds the state's fp32 o, row_max its m and row_sum its l (on the quad leader only:
  // row_sum is a per-lane partial summed over the quad at the end), so the tiles below add to
  // the state directly and the end of the step only writes. The loads run while the Q and first
  // K/V tiles arrive, instead of in a load-merge-store tail that nothing overlaps. The first step
  // and rows past the queries start empty: m = -inf, l = 0, o = 0.
  float out_acc[kMTiles][kOutputTiles][4];
  float row_max[kMTiles][2], row_sum[kMTiles][2];
  {
    const BlockCoord at = block_coord(query_block(), params.kv_heads, kBlockM);
    const int lane = threadIdx.x % 32;
    const int warp_row0 = (threadIdx.x / 32) * Traits::kRowsPerWarp;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
#pragma unroll
        for (int d = 0; d < kOutputTiles; ++d) {
          out_acc[mt][d][2 * half] = 0.0f;
          out_acc[mt][d][2 * half + 1] = 0.0f;
        }
        row_max[mt][half] = -positive_infinity();
        row_sum[mt][half] = 0.0f;
        const int packed = at.first_packed + warp_row0 + mt * 16 + acc_row(lane, 2 * half);
        if (params.is_first_step || packed >= params.q_len * kGroup) continue;
        const long long row = row_place<kGroup>(params, at.batch, at.kv_head, packed).state;
        row_max[mt][half] = load_global(params.m_state + row);
        if (lane % 4 == 0) row_sum[mt][half] = load_global(params.l_state + row);
        const float* o_state = params.o_state + row * kHeadDim;
#pragma unroll
        for (int d = 0; d < kOutputTiles; ++d) {
          const FloatPair saved = load_global(reinterpret_cast<const FloatPair*>(o_state + d * 8 + acc_col(lane, 0)));
          out_acc[mt][d][2 * half] = saved.x;
          out_acc[mt][d][2 * half + 1] = saved.y;
        }
      }
  }

  // ---- Main loop over key tiles ---------------------------------------------------------------
  for (int run = 0; run < tile_count; ++run) {
    const int tile = tiles.begin + run;
    const int stage = kStages == 1 ? 0 : run % kStages;
    const u32 shared_base = shared_address(shared_storage);
    const u32 q_tile = shared_base + Traits::kQOffset;
    if constexpr (kStages == 1) {
      __syncthreads();  // every warp is done reading the previous tile
      load_kv_tile_async<Traits>(params, shared_base + Traits::kKOffset,
                                 shared_base + Traits::kVOffset, tile * kBlockN);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
    } else {
      // Tile `tile` (and the Q tile) has landed once at most kStages - 2 newer groups are pending;
      // the barrier also proves every warp left tile - 1, whose stage the next load reuses.
      cp_async_wait<kStages - 2>();
      __syncthreads();
      const int next = run + kStages - 1;
      if (next < tile_count) {
        const int next_stage = next % kStages;
        load_kv_tile_async<Traits>(params,
                                   shared_base + Traits::kKOffset + next_stage * Traits::kKvTileBytes,
                                   shared_base + Traits::kVOffset + next_stage * Traits::kKvTileBytes,
                                   (tiles.begin + next) * kBlockN);
      }
      cp_async_commit();
    }
    const u32 k_tile = shared_base + Traits::kKOffset + stage * Traits::kKvTileBytes;
    const u32 v_tile = shared_base + Traits::kVOffset + stage * Traits::kKvTileBytes;

    // Per-lane ldmatrix offsets at step 0 (layout.cuh): Q rows of this warp, K rows as the [n][k]
    // B operand, V rows as the [k][n] B operand read transposed. Recomputed per tile from an
    // opaque thread index (a handful of integer instructions) rather than held across the loop.
    const int tid = opaque(static_cast<int>(threadIdx.x));
    const int lane = tid % 32;
    const int warp_row0 = (tid / 32) * Traits::kRowsPerWarp;
    const int q_row = warp_row0 + ldmatrix_a_row(lane);
    const int q_chunk = lane_chunk_bytes(q_row, ldmatrix_a_col(lane), kHeadDim);
    const int q_lane = swizzled_offset(q_row, ldmatrix_a_col(lane), kHeadDim) * 2;
    const int k_chunk = lane_chunk_bytes(ldmatrix_b_row(lane), ldmatrix_b_col(lane), kHeadDim);
    const int k_lane = swizzled_offset(ldmatrix_b_row(lane), ldmatrix_b_col(lane), kHeadDim) * 2;
    const int v_chunk = lane_chunk_bytes(ldmatrix_bt_row(lane), ldmatrix_bt_col(lane), kHeadDim);
    const int v_lane = swizzled_offset(ldmatrix_bt_row(lane), ldmatrix_bt_col(lane), kHeadDim) * 2;

    // The tile's keys in sub-tiles of kSubKeys (traits.cuh): all of them at once when the score
    // and output accumulators fit, in halves or quarters otherwise. Moving kSubKeys rows down a
    // swizzled tile keeps every lane's chunk XOR (kSubKeys is a multiple of 16).
#pragma unroll 1
    for (int sub = 0; sub < Traits::kSubTiles; ++sub) {
      const int key0 = tile * kBlockN + sub * kSubKeys;
      if (key0 >= params.kv_len) break;
      const u32 k_sub = k_tile + sub * kSubKeys * kRowBytes;
      const u32 v_sub = v_tile + sub * kSubKeys * kRowBytes;

      // S = Q K^T: per k-step, this warp's Q fragments (kMTiles x 4 registers, re-read from
      // shared memory instead of held for the whole head dim) against two key n8-tiles per
      // ldmatrix. Unrolled by 2, not fully: fully unrolled, ptxas hoists the ldmatrix of later
      // k-steps over the MMAs and runs out of registers at 32 rows per warp.
      float scores[kMTiles][kScoreTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int j = 0; j < kScoreTiles; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) scores[mt][j][e] = 0.0f;
#pragma unroll 2
      for (int kk = 0; kk < Traits::kQkSteps; ++kk) {
        u32 q_frag[kMTiles][4];
        const u32 q_step = q_tile + step_offset_bytes(q_lane, q_chunk, kk, kHeadDim);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) ldmatrix_x4(q_frag[mt], q_step + mt * 16 * kRowBytes);
        const u32 k_step = k_sub + step_offset_bytes(k_lane, k_chunk, kk, kHeadDim);
#pragma unroll
        for (int jp = 0; jp < kScoreTiles / 2; ++jp) {
          u32 k_frag[4];
          ldmatrix_x4(k_frag, k_step + jp * 16 * kRowBytes);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_16816<T>(scores[mt][2 * jp], q_frag[mt], k_frag[0], k_frag[1]);
            mma_16816<T>(scores[mt][2 * jp + 1], q_frag[mt], k_frag[2], k_frag[3]);
          }
        }
      }

      // Softcap first, so that a masked score below still becomes -inf (tanh(-inf) would give
      // -c). s = c tanh(scale q.k / c) enters the softmax in the log2 domain as
      // (c log2 e) tanh(q.k (scale / c)), and the softmax below then scales by 1.
      if constexpr (kSoftcap) {
        const float cap_log2 = params.softcap * 1.4426950408889634f;
        const float tanh_scale = params.scale_log2 * 0.6931471805599453f / params.softcap;
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int j = 0; j < kScoreTiles; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) scores[mt][j][e] = cap_log2 * softcap_tanh(scores[mt][j][e] * tanh_scale);
      }

      // Mask: keys past the end of the chunk, and keys outside the row's visible ones (causal:
      // after the row's query; key intervals: outside [q_key_first, q_key_last]). Positions
      // increase along the chunk, so the keys of a sub-tile that a row sees are one index run
      // [row_key_begin, row_key_end) of it, found by binary searches over the sub-tile's positions
      // (causal: the run starts at the sub-tile's first key). Only on tiles outside the mask-free
      // run; loading a position per key here costs registers that 32 rows per warp do not have.
      if ((kKeyIntervals && tile < tiles.full_begin) || tile >= tiles.full_end) {
        const int keys_here = min(kSubKeys, params.kv_len - key0);
        int row_key_begin[kMTiles][2], row_key_end[kMTiles][2];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            row_key_begin[mt][half] = key0;
            row_key_end[mt][half] = key0 + keys_here;
            if constexpr (kCausal || kKeyIntervals) {
              const int packed = opaque(query_block()) * kBlockM + warp_row0 + mt * 16 + acc_row(lane, 2 * half);
              const RowKeys keys = row_tile_keys<Traits>(params, key0, keys_here, packed);
              row_key_begin[mt][half] = keys.begin;
              row_key_end[mt][half] = keys.end;
            }
          }
#pragma unroll
        for (int j = 0; j < kScoreTiles; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key0 + j * 8 + acc_col(lane, e);
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
              const bool before = kKeyIntervals && key < row_key_begin[mt][e / 2];
              if (before || key >= row_key_end[mt][e / 2]) scores[mt][j][e] = -positive_infinity();
            }
          }
      }

      // Online softmax; the output is rescaled only when some row of the warp moved its m
      // (exp2(m_old - m_new) != 1), which m's lag (softmax.cuh, kMaxLag) makes rare after the
      // first tile.
      float rescale[kMTiles][2];
      online_softmax_tile<kMTiles, kScoreTiles>(scores, row_max, row_sum, rescale,
                                                 kSoftcap ? 1.0f : params.scale_log2);
      bool max_moved = false;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) max_moved |= rescale[mt][0] != 1.0f || rescale[mt][1] != 1.0f;
      if (__any_sync(0xffffffffu, max_moved)) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int d = 0; d < kOutputTiles; ++d)
#pragma unroll
            for (int e = 0; e < 4; ++e) out_acc[mt][d][e] *= rescale[mt][e / 2];
      }

      // O += P V: the S accumulator of key n8-tiles 2kk and 2kk+1 is exactly the A fragment of
      // k-step kk once packed to 16 bits (rows g / g+8, keys 2t..2t+1 and 2t+8..2t+9).
#pragma unroll
      for (int kk = 0; kk < Traits::kPvSteps; ++kk) {
        u32 p_frag[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          p_frag[mt][0] = pack2<T>(scores[mt][2 * kk][0], scores[mt][2 * kk][1]);
          p_frag[mt][1] = pack2<T>(scores[mt][2 * kk][2], scores[mt][2 * kk][3]);
          p_frag[mt][2] = pack2<T>(scores[mt][2 * kk + 1][0], scores[mt][2 * kk + 1][1]);
          p_frag[mt][3] = pack2<T>(scores[mt][2 * kk + 1][2], scores[mt][2 * kk + 1][3]);
        }
        const u32 v_step = v_sub + kk * 16 * kRowBytes;
#pragma unroll
        for (int dp = 0; dp < kOutputTiles / 2; ++dp) {
          u32 v_frag[4];
          ldmatrix_x4_trans(v_frag, v_step + step_offset_bytes(v_lane, v_chunk, dp, kHeadDim));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_16816<T>(out_acc[mt][2 * dp], p_frag[mt], v_frag[0], v_frag[1]);
            mma_16816<T>(out_acc[mt][2 * dp + 1], p_frag[mt], v_frag[2], v_frag[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();  // no group may outlive the CTA (only empty ones can be pending here)

  // ---- Write the state back; on the last step, out and lse instead ------------------------------
  // The rows already hold the merged state (read before the loop), so nothing is read here. The
  // rows' coordinates are recomputed from opaque copies: CSE with the loads before the loop would
  // hold them across it, in registers the hd128 kernels do not have (255, a spill at gqa1).
  const BlockCoord at = block_coord(opaque(query_block()), params.kv_heads, kBlockM);
  const int packed_rows = params.q_len * kGroup;
  const int tid = opaque(static_cast<int>(threadIdx.x));
  const int lane = tid % 32;
  const int warp_row0 = (tid / 32) * Traits::kRowsPerWarp;
  const bool quad_leader = lane % 4 == 0;
  // Every lane of a quad read the row's m (the leader also its l) before the loop; the leader
  // overwrites them only after this barrier. A GPU's lanes need not run in lockstep since Volta,
  // nor do the emulator's, and the MMAs in between order no memory accesses.
  __syncwarp();

#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int packed = at.first_packed + warp_row0 + mt * 16 + acc_row(lane, 2 * half);
      const float l = quad_sum(row_sum[mt][half]);  // every lane of the quad takes part
      if (packed >= packed_rows) continue;
      const RowPlace place = row_place<kGroup>(params, at.batch, at.kv_head, packed);
      const long long row = place.state;
      const float m = row_max[mt][half];
      if (params.is_last_step) {
        const float inv_l = output_scale(l);
        char* out_row = static_cast<char*>(params.out) + place.out * 2;
#pragma unroll
        for (int d = 0; d < kOutputTiles; ++d) {
          const int col = d * 8 + acc_col(lane, 0);
          store_global(reinterpret_cast<u32*>(out_row + col * 2),
                       pack2<T>(inv_l * out_acc[mt][d][2 * half], inv_l * out_acc[mt][d][2 * half + 1]));
        }
        if (quad_leader) store_global(params.lse + row, lse_natural(m, l));
      } else {
        float* o_state = params.o_state + row * kHeadDim;
#pragma unroll
        for (int d = 0; d < kOutputTiles; ++d) {
          const FloatPair o = {out_acc[mt][d][2 * half], out_acc[mt][d][2 * half + 1]};
          store_global(reinterpret_cast<FloatPair*>(o_state + d * 8 + acc_col(lane, 0)), o);
        }
        if (quad_leader) {
          store_global(params.m_state + row, m);
          store_global(params.l_state + row, l);
        }
      }
    }
}

}  // namespace device
}  // namespace cpgen
