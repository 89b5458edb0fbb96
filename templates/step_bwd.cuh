// The backward ring-step kernel: this rank's queries against the K/V chunk it holds in this step,
// producing the step's dQ (added into an fp32 accumulator), dK and dV (written into or added to
// the chunk's fp32 accumulators that travel the ring). Math and layouts: params_bwd.cuh.
//
// Structure: FlashAttention-2's KV-outer loop. A CTA owns kBlockN keys of one kv head and walks
// every query tile that can see them (all kGroup query heads of the kv head, packed as in the
// forward), so dK and dV of its keys stay in registers for the whole step, sum over the group's
// heads inside the kernel, and are written once; dQ, which every key tile contributes to, is added
// with red.global.add (by column pairs from sm_90, atomic.cuh). Why this and not separate dQ and
// dK/dV kernels: the separate kernels compute S = Q K^T and dP = dO V^T twice (7 tile GEMMs per
// tile pair instead of 5, 1.4x the tensor-core work) to avoid the atomics, and FlashAttention-2
// and -3 both found the atomics cheaper on A100/H100. The ring adds a reason: dK/dV are what
// travel, so the kernel that owns them per CTA writes each accumulator element exactly once per
// step without atomics. (No GPU has timed this kernel yet; the tile configs are the tuner's
// search space.)
//
// Per query tile of kBlockM packed rows (warp w owns keys of slice w % kKeyGroups and dK/dV head
// columns of slice w / kKeyGroups, traits_bwd.cuh):
//   S^T = K Q^T, dP^T = V dO^T          mma.sync, K and V fragments as A, Q and dO as B
//   P^T = exp2(S^T scale_log2 - lse_log2)  recomputed from the forward's lse; masked -> 0
//   dS^T = P^T (dP^T - delta)
//   dV += P^T dO, dK += dS^T Q           P^T and dS^T repacked to 16 bits in registers
//   dS^T -> shared memory; dQ += dS K    per 16 x 32 item, red.global.add per column pair
// Causal: query tiles whose every query precedes the CTA's first key are never loaded (positions
// are increasing, so they form a prefix); tiles that straddle the diagonal and a partial last key
// tile take the per-element mask. Key intervals (kKeyIntervals; causal, windows and documents, the
// causal flag then plays no part): the CTA walks only the query tiles holding a query whose
// interval reaches its keys (interval_queries, mask.cuh: a contiguous run, since both interval
// ends are non-decreasing along the queries); a tile wholly inside the run of queries that see
// every key of the CTA runs unmasked, the others test each element against its row's interval.
// A key block no query sees loads nothing: in add mode it returns at once, in write mode (the
// chunk's first step) it writes zeros, since that step defines the accumulator. A row whose lse
// is -inf (it saw no key in the forward) and the padding rows past q_len get lse_log2 = +inf, so
// P = exp2(-inf) = 0 and dS = 0: zero gradients, never NaN.
//
// Softcap (kSoftcap): the logit is t = c tanh(scale q.k / c), P = exp(t - lse), and by the chain
// rule dS = P (dP - delta) dt/d(scale q.k) = P (dP - delta) (1 - (t / c)^2); dQ and dK keep the
// softmax scale as without it. tanh and that slope come from one exponential (softmax.cuh
// tanh_and_slope), as the forward's tanh does, so P is the forward's; from tanh.approx, 2^-11
// would be all of 1 - (t / c)^2 where the cap saturates.
//
// Memory: K and V tiles stay in shared memory; Q and dO tiles arrive through a kStages-deep
// cp.async pipeline. Launch: grid (ceil(kv_len / kBlockN), pair_grid(batch, kv_heads)), i.e. kv
// heads on y and batch on z, the (batch, kv head) pairs folded over y and z only where those do
// not fit (layout.cuh); block kWarps * 32 threads, dynamic shared memory BwdTraits::kSharedBytes;
// q, k, v, dout 16-byte aligned with element strides multiples of 8; dq_acc, dk_acc, dv_acc 8-byte
// aligned.
#pragma once

#include "cpgen/atomic.cuh"
#include "cpgen/global_access.cuh"
#include "cpgen/layout.cuh"
#include "cpgen/mask.cuh"
#include "cpgen/mma.cuh"
#include "cpgen/params_bwd.cuh"
#include "cpgen/shared_access.cuh"
#include "cpgen/softmax.cuh"
#include "cpgen/traits_bwd.cuh"

namespace cpgen {
namespace device {

// Two adjacent fp32 accumulator columns, moved as one 8-byte access.
struct alignas(8) BwdFloatPair {
  float x, y;
};

// Issues this thread's cp.async chunks of a tile of kRows rows into a swizzled shared tile. Row r
// of the tile is row first_row + r of a packed matrix whose row p sits at
// base + (p % kRowGroup) * group_stride + (p / kRowGroup) * row_stride (bytes): kRowGroup = 1 for
// K and V, the GQA group for the packed Q and dO rows. Rows past total_rows are zero-filled.
template <typename Traits, int kRows, int kRowGroup>
CPGEN_DEVICE void load_bwd_tile_async(u32 dst, const char* base, long long group_stride,
                                      long long row_stride, int first_row, int total_rows) {
  constexpr int kChunksPerRow = Traits::kChunksPerRow;
  constexpr int kChunks = kRows * kChunksPerRow;
  constexpr int kLoads = (kChunks + Traits::kThreads - 1) / Traits::kThreads;
  const int tid = opaque(static_cast<int>(threadIdx.x));
  // A whole tile where a pass of the CTA covers whole rows and whole row groups: a thread's rows
  // r0, r0 + P, ... share their place in the group, so its source steps by P / kRowGroup rows and
  // needs no bound (as step_fwd.cuh's K/V copy; the Q/dO tiles are copied once per query tile).
  constexpr int kRowsPerPass = Traits::kThreads / kChunksPerRow;
  if constexpr (Traits::kThreads % kChunksPerRow == 0 && kRowsPerPass % kRowGroup == 0) {
    if (first_row + kRows <= total_rows) {
      const unsigned utid = static_cast<unsigned>(tid);
      const int row0 = static_cast<int>(utid / kChunksPerRow), chunk = static_cast<int>(utid % kChunksPerRow);
      const int p0 = first_row + row0;
      const char* src = base + (p0 % kRowGroup) * group_stride +
                        static_cast<long long>(p0 / kRowGroup) * row_stride + chunk * 16;
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int row = row0 + i * kRowsPerPass;
        if (kChunks % Traits::kThreads == 0 || row < kRows)
          cp_async_16(dst + swizzled_offset(row, chunk * 8, Traits::kHeadDim) * 2, src, true);
        src += (kRowsPerPass / kRowGroup) * row_stride;
      }
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const int chunk_id = tid + i * Traits::kThreads;
    if (kChunks % Traits::kThreads == 0 || chunk_id < kChunks) {
      const int row = chunk_id / kChunksPerRow;
      const int chunk = chunk_id % kChunksPerRow;
      const int packed = first_row + row;
      const bool valid = packed < total_rows;
      const int p = valid ? packed : 0;
      const char* src = base + (p % kRowGroup) * group_stride +
                        static_cast<long long>(p / kRowGroup) * row_stride + chunk * 16;
      cp_async_16(dst + swizzled_offset(row, chunk * 8, Traits::kHeadDim) * 2, src, valid);
    }
  }
}

// The Q and dO tiles of query tile `block` into pipeline stage `stage`.
template <typename Traits>
CPGEN_DEVICE void load_q_do_async(const RingBwdParams& params, u32 shared_base, int stage, int block) {
  const BatchHead at = unfold_batch_head(opaque(static_cast<int>(blockIdx.y)), opaque(static_cast<int>(blockIdx.z)),
                                         opaque(static_cast<int>(gridDim.y)), params.kv_heads);
  const int batch = at.batch, kv_head = at.kv_head;
  const long long first_head = static_cast<long long>(kv_head) * Traits::kGroup;
  const char* q_base = static_cast<const char*>(params.q) +
                       (batch * params.q_batch_stride + first_head * params.q_head_stride) * 2;
  const char* do_base = static_cast<const char*>(params.dout) +
                        (batch * params.dout_batch_stride + first_head * params.dout_head_stride) * 2;
  const int packed_rows = params.q_len * Traits::kGroup;
  load_bwd_tile_async<Traits, Traits::kBlockM, Traits::kGroup>(
      shared_base + Traits::kQOffset + stage * Traits::kQTileBytes, q_base, params.q_head_stride * 2,
      params.q_row_stride * 2, block * Traits::kBlockM, packed_rows);
  load_bwd_tile_async<Traits, Traits::kBlockM, Traits::kGroup>(
      shared_base + Traits::kDoOffset + stage * Traits::kQTileBytes, do_base,
      params.dout_head_stride * 2, params.dout_row_stride * 2, block * Traits::kBlockM, packed_rows);
}

// The per-row table's inputs for one packed query row, as loaded: lse (natural log, -inf for
// padding), delta, and for the mask the query position (causal) or the row's visible key interval
// [pos, key_last] (key intervals). The table holds lse in the log2 domain, +inf for padding and
// for rows that saw no key (which makes their P exactly 0): converted when stored, a tile after
// the load, so that nothing waits for the load in the tile that issues it.
struct BwdRowValues {
  float lse, delta;
  int pos, key_last;
};

// The row values of packed row `packed` of the (batch, kv head) pair, read from global memory.
template <typename Traits>
CPGEN_DEVICE BwdRowValues load_row_values(const RingBwdParams& params, int batch, int kv_head, int packed) {
  // Padding rows: no gradient, after every key (causal), an empty interval (key intervals).
  BwdRowValues v = {-positive_infinity(), 0.0f, 0x7fffffff, 0};
  if (packed < params.q_len * Traits::kGroup) {
    const PackedRow pr = unpack_row(packed, Traits::kGroup);
    const long long row = state_row(batch, params.q_heads, kv_head * Traits::kGroup + pr.head_in_group,
                                    state_pitch(params.state_len, params.q_len), pr.query_index);
    v.lse = load_global(params.lse + row);
    v.delta = load_global(params.delta + row);
    if constexpr (Traits::kKeyIntervals) {
      v.pos = load_global(params.q_key_first + pr.query_index);
      v.key_last = load_global(params.q_key_last + pr.query_index);
    } else if constexpr (Traits::kCausal) {
      v.pos = load_global(params.q_positions + pr.query_index);
    }
  }
  return v;
}

template <typename Traits>
CPGEN_DEVICE void ring_bwd_step(const RingBwdParams& params) {
  using T = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kStages = Traits::kStages;
  constexpr int kGroup = Traits::kGroup;
  constexpr int kKeyMTiles = Traits::kKeyMTiles;
  constexpr int kQueryTiles = Traits::kQueryTiles;
  constexpr int kDimTiles = Traits::kDimTiles;
  constexpr bool kKeyIntervals = Traits::kKeyIntervals;
  constexpr bool kSoftcap = Traits::kSoftcap;
  // The intervals hold the causal bound themselves; kCausal then selects nothing.
  constexpr bool kCausal = Traits::kCausal && !kKeyIntervals;
  constexpr bool kMasked = kCausal || kKeyIntervals;  // some key block may see no query
  constexpr float kLog2e = 1.4426950408889634f;

  extern __shared__ __align__(128) unsigned char shared_storage[];
  float* row_lse_log2 = reinterpret_cast<float*>(shared_storage + Traits::kRowsOffset);
  float* row_delta = row_lse_log2 + kBlockM;
  // Causal: the row's query position. Key intervals: the row's first visible key position, and
  // row_key_last (past it, 4 more bytes per row, traits_bwd.cuh) its last.
  int* row_pos = reinterpret_cast<int*>(row_delta + kBlockM);
  int* row_key_last = row_pos + kBlockM;

  // This CTA's (batch, kv head) pair; the few blocks of the last z layer past the end return
  // before any barrier, as a whole CTA. Problem validation keeps batch * kv_heads below 2^31.
  const long long pair = unfold_pair(blockIdx.y, blockIdx.z, gridDim.y);
  if (pair >= static_cast<long long>(params.batch) * params.kv_heads) return;
  const BatchHead at = unfold_batch_head(blockIdx.y, blockIdx.z, gridDim.y, params.kv_heads);
  const int batch = at.batch, kv_head = at.kv_head;
  const int key0 = blockIdx.x * kBlockN;
  const int keys_here = min(kBlockN, params.kv_len - key0);
  const int packed_rows = params.q_len * kGroup;
  const int query_blocks = (packed_rows + kBlockM - 1) / kBlockM;

  // Causal: the queries before the first key's position see none of this CTA's keys; they are a
  // prefix of the local order, and the query tiles wholly inside it are skipped (all of them when
  // no query sees a key).
  int first_block = 0, end_block = query_blocks, k_first_pos = 0, k_last_pos = 0;
  // Key intervals: tiles [full_first, full_end) hold only queries that see every key here.
  int full_first = 0, full_end = 0;
  if constexpr (kCausal) {
    k_first_pos = load_global(params.kv_positions + key0);
    k_last_pos = load_global(params.kv_positions + key0 + keys_here - 1);
    const int blind_queries = count_at_or_before_in_runs(params.q_positions, params.q_len, k_first_pos - 1);
    first_block = blind_queries == params.q_len ? query_blocks : blind_queries * kGroup / kBlockM;
  } else if constexpr (kKeyIntervals) {
    k_first_pos = load_global(params.kv_positions + key0);
    k_last_pos = load_global(params.kv_positions + key0 + keys_here - 1);
    const IntervalQueries seeing =
        interval_queries(params.q_key_first, params.q_key_last, params.q_len, k_first_pos, k_last_pos);
    // Query i owns packed rows [i kGroup, (i + 1) kGroup).
    if (seeing.seen.begin < seeing.seen.end) {
      first_block = seeing.seen.begin * kGroup / kBlockM;
      end_block = (seeing.seen.end * kGroup + kBlockM - 1) / kBlockM;
    } else {
      end_block = 0;
    }
    if (seeing.all.begin < seeing.all.end) {
      full_first = (seeing.all.begin * kGroup + kBlockM - 1) / kBlockM;
      full_end = seeing.all.end * kGroup / kBlockM;
    }
  }
  const int blocks = end_block - first_block;
  // No query sees these keys: nothing to add, and nothing to load. The whole CTA leaves together,
  // before any barrier.
  if (kMasked && blocks <= 0 && params.accumulate_dkv) return;

  // ---- K and V tiles (once) and the first kStages - 1 Q/dO tiles ------------------------------
  const u32 shared_start = shared_address(shared_storage);
  if (blocks > 0) {
    const char* k_base = static_cast<const char*>(params.k) +
                         (batch * params.k_batch_stride + kv_head * params.k_head_stride) * 2;
    const char* v_base = static_cast<const char*>(params.v) +
                         (batch * params.v_batch_stride + kv_head * params.v_head_stride) * 2;
    load_bwd_tile_async<Traits, kBlockN, 1>(shared_start + Traits::kKOffset, k_base, 0,
                                            params.k_row_stride * 2, key0, params.kv_len);
    load_bwd_tile_async<Traits, kBlockN, 1>(shared_start + Traits::kVOffset, v_base, 0,
                                            params.v_row_stride * 2, key0, params.kv_len);
  }
  cp_async_commit();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < blocks) load_q_do_async<Traits>(params, shared_start, s, first_block + s);
    cp_async_commit();  // empty groups keep the wait counts uniform
  }

  float dk_acc[kKeyMTiles][kDimTiles][4], dv_acc[kKeyMTiles][kDimTiles][4];
#pragma unroll
  for (int mt = 0; mt < kKeyMTiles; ++mt)
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk_acc[mt][d][e] = dv_acc[mt][d][e] = 0.0f;

  // Softcap: scale / c turns the raw q.k into the tanh argument, c log2(e) the tanh into the
  // log2-domain logit.
  float scale_over_cap = 0.0f, cap_log2 = 0.0f;
  if constexpr (kSoftcap) {
    scale_over_cap = params.scale / params.softcap;
    cap_log2 = params.softcap * kLog2e;
  }

  // The row table's values of the next query tile, loaded from global memory one tile ahead (a
  // thread per row), so that their latency hides behind a tile's work instead of stalling the
  // barrier that publishes the table.
  constexpr int kRowSlots = (kBlockM + Traits::kThreads - 1) / Traits::kThreads;
  BwdRowValues next_rows[kRowSlots];
  // f(slot, r) for each row r of the tile this thread owns, slot its place in next_rows.
  const auto for_each_own_row = [&](auto&& f) {
#pragma unroll
    for (int slot = 0; slot < kRowSlots; ++slot) {
      const int r = static_cast<int>(threadIdx.x) + slot * Traits::kThreads;
      if (kBlockM % Traits::kThreads == 0 || r < kBlockM) f(slot, r);
    }
  };
  const auto fetch_rows = [&](int block) {
    for_each_own_row([&](int slot, int r) {
      next_rows[slot] = load_row_values<Traits>(params, batch, kv_head, block * kBlockM + r);
    });
  };
  if (blocks > 0) fetch_rows(first_block);

  // ---- Main loop over query tiles -------------------------------------------------------------
  for (int it = 0; it < blocks; ++it) {
    const int block = first_block + it;
    const int stage = kStages == 1 ? 0 : it % kStages;
    const u32 shared_base = shared_address(shared_storage);
    if constexpr (kStages == 1) {
      __syncthreads();  // every warp is done with the previous tile
      load_q_do_async<Traits>(params, shared_base, 0, block);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
    } else {
      // Tile `it` (and K/V) has landed once at most kStages - 2 newer groups are pending; the
      // barrier also proves every warp left tile it - 1, whose stage the next load reuses.
      cp_async_wait<kStages - 2>();
      __syncthreads();
      const int next = it + kStages - 1;
      if (next < blocks) load_q_do_async<Traits>(params, shared_base, next % kStages, first_block + next);
      cp_async_commit();
    }

    // The tile's row table (BwdRowValues), from the values fetched one tile ago; then the next
    // tile's fetch, which lands while this tile runs.
    for_each_own_row([&](int slot, int r) {
      const float lse = next_rows[slot].lse;
      store_shared(&row_lse_log2[r], lse == -positive_infinity() ? positive_infinity() : lse * kLog2e);
      store_shared(&row_delta[r], next_rows[slot].delta);
      if constexpr (kMasked) store_shared(&row_pos[r], next_rows[slot].pos);
      if constexpr (kKeyIntervals) store_shared(&row_key_last[r], next_rows[slot].key_last);
    });
    if (it + 1 < blocks) fetch_rows(block + 1);
    __syncthreads();

    const int tid = opaque(static_cast<int>(threadIdx.x));
    const int lane = tid % 32;
    const int warp = tid / 32;
    const int key_row0 = (warp % Traits::kKeyGroups) * Traits::kKeyRowsPerWarp;
    const int dim_col0 = (warp / Traits::kKeyGroups) * Traits::kDimColsPerWarp;
    const u32 k_tile = shared_base + Traits::kKOffset;
    const u32 v_tile = shared_base + Traits::kVOffset;
    const u32 q_tile = shared_base + Traits::kQOffset + stage * Traits::kQTileBytes;
    const u32 do_tile = shared_base + Traits::kDoOffset + stage * Traits::kQTileBytes;
    const u32 ds_tile = shared_base + Traits::kDsOffset;

    // S^T = K Q^T and dP^T = V dO^T for this warp's keys against every query of the tile.
    float st[kKeyMTiles][kQueryTiles][4], dpt[kKeyMTiles][kQueryTiles][4];
#pragma unroll
    for (int mt = 0; mt < kKeyMTiles; ++mt)
#pragma unroll
      for (int j = 0; j < kQueryTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) st[mt][j][e] = dpt[mt][j][e] = 0.0f;
    // Each lane's k-step 0 offsets; step kk XORs their chunk bits (layout.cuh step_offset_bytes),
    // and the further 16-row tiles are constant offsets, since the swizzle repeats every 16 rows.
    const int kv_row = key_row0 + ldmatrix_a_row(lane);
    const int kv_chunk = lane_chunk_bytes(kv_row, ldmatrix_a_col(lane), kHeadDim);
    const int kv_lane = swizzled_offset(kv_row, ldmatrix_a_col(lane), kHeadDim) * 2;
    const int qd_chunk = lane_chunk_bytes(ldmatrix_b_row(lane), ldmatrix_b_col(lane), kHeadDim);
    const int qd_lane = swizzled_offset(ldmatrix_b_row(lane), ldmatrix_b_col(lane), kHeadDim) * 2;
    constexpr int kRowBytes = kHeadDim * 2;
#pragma unroll 1
    for (int kk = 0; kk < Traits::kQkSteps; ++kk) {
      u32 k_frag[kKeyMTiles][4], v_frag[kKeyMTiles][4];
      const int kv_step = step_offset_bytes(kv_lane, kv_chunk, kk, kHeadDim);
#pragma unroll
      for (int mt = 0; mt < kKeyMTiles; ++mt) {
        ldmatrix_x4(k_frag[mt], k_tile + kv_step + mt * 16 * kRowBytes);
        ldmatrix_x4(v_frag[mt], v_tile + kv_step + mt * 16 * kRowBytes);
      }
      const int qd_step = step_offset_bytes(qd_lane, qd_chunk, kk, kHeadDim);
#pragma unroll
      for (int jp = 0; jp < kQueryTiles / 2; ++jp) {
        u32 q_frag[4], do_frag[4];
        ldmatrix_x4(q_frag, q_tile + qd_step + jp * 16 * kRowBytes);
        ldmatrix_x4(do_frag, do_tile + qd_step + jp * 16 * kRowBytes);
#pragma unroll
        for (int mt = 0; mt < kKeyMTiles; ++mt) {
          mma_16816<T>(st[mt][2 * jp], k_frag[mt], q_frag[0], q_frag[1]);
          mma_16816<T>(st[mt][2 * jp + 1], k_frag[mt], q_frag[2], q_frag[3]);
          mma_16816<T>(dpt[mt][2 * jp], v_frag[mt], do_frag[0], do_frag[1]);
          mma_16816<T>(dpt[mt][2 * jp + 1], v_frag[mt], do_frag[2], do_frag[3]);
        }
      }
    }

    // P^T and dS^T in place. The mask is needed on a partial key tile and, causal, on query tiles
    // that straddle the diagonal of this CTA's keys; with key intervals, on the tiles outside the
    // run of queries that see every key here.
    bool need_mask = keys_here < kBlockN;
    if constexpr (kCausal) {
      const int q_first_pos = load_shared(&row_pos[0]);
      const int q_last_pos = load_global(params.q_positions + block_last_query(block, kBlockM, kGroup, params.q_len));
      need_mask = need_mask ||
                  classify_tile(q_first_pos, q_last_pos, k_first_pos, k_last_pos, kCausal) != TileClass::kFull;
    } else if constexpr (kKeyIntervals) {
      need_mask = need_mask || block < full_first || block >= full_end;
    }
#pragma unroll
    for (int mt = 0; mt < kKeyMTiles; ++mt)
#pragma unroll
      for (int j = 0; j < kQueryTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = j * 8 + acc_col(lane, e);
          float p, slope = 1.0f;
          if constexpr (kSoftcap) {
            // tanh(scale q.k / c) = t / c; P = exp(t - lse) = exp2(t log2(e) - lse log2(e)). The
            // tanh and its slope come from one exponential (softmax.cuh tanh_and_slope).
            const TanhSlope capped = tanh_and_slope(st[mt][j][e] * scale_over_cap);
            p = exp2_approx(fmaf(capped.tanh, cap_log2, -load_shared(&row_lse_log2[col])));
            slope = capped.slope;
          } else {
            p = exp2_approx(fmaf(st[mt][j][e], params.scale_log2, -load_shared(&row_lse_log2[col])));
          }
          st[mt][j][e] = p;
          if constexpr (kSoftcap) {
            dpt[mt][j][e] = p * (dpt[mt][j][e] - load_shared(&row_delta[col])) * slope;
          } else {
            dpt[mt][j][e] = p * (dpt[mt][j][e] - load_shared(&row_delta[col]));
          }
        }
    // The mask, as a pass of its own over the tiles that need it (as the forward's): a hidden
    // element gets P = dS = 0 by assignment, so whatever the unmasked formula gave there (a hidden
    // key may score above the row's lse, even to exp2 overflow) is dropped, not multiplied.
    if (need_mask) {
#pragma unroll
      for (int mt = 0; mt < kKeyMTiles; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int key_local = key_row0 + mt * 16 + acc_row(lane, 2 * half);
          const bool key_valid = key_local < keys_here;
          const int key_pos = kMasked && key_valid ? load_global(params.kv_positions + key0 + key_local) : 0;
#pragma unroll
          for (int j = 0; j < kQueryTiles; ++j)
#pragma unroll
            for (int e = 2 * half; e < 2 * half + 2; ++e) {
              const int col = j * 8 + acc_col(lane, e);
              // Evaluated whole (no short circuit), so the pass is selects rather than branches.
              bool hidden = !key_valid;
              if constexpr (kCausal) hidden |= key_pos > load_shared(&row_pos[col]);
              if constexpr (kKeyIntervals)
                hidden |= !key_in_interval(load_shared(&row_pos[col]), load_shared(&row_key_last[col]), key_pos);
              st[mt][j][e] = hidden ? 0.0f : st[mt][j][e];
              dpt[mt][j][e] = hidden ? 0.0f : dpt[mt][j][e];
            }
        }
    }

    // dS^T to shared memory as [key][query] 16-bit pairs (one warp per key slice writes it).
    if (warp < Traits::kKeyGroups) {
#pragma unroll
      for (int mt = 0; mt < kKeyMTiles; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int key_local = key_row0 + mt * 16 + acc_row(lane, 2 * half);
#pragma unroll
          for (int j = 0; j < kQueryTiles; ++j) {
            const int col = j * 8 + acc_col(lane, 0);
            store_shared(reinterpret_cast<u32*>(shared_storage + Traits::kDsOffset +
                                                (key_local * Traits::kDsPitch + col) * 2),
                         pack2<T>(dpt[mt][j][2 * half], dpt[mt][j][2 * half + 1]));
          }
        }
    }

    // dV += P^T dO and dK += dS^T Q over this warp's head-dim columns: the accumulator of query
    // n8-tiles 2kk and 2kk+1 is the A fragment of k-step kk once packed (as P in the forward).
    // dO and Q (B, [query][d]) are read transposed, the lane at row kk * 16 + ldmatrix_bt_row (the
    // swizzle repeats every 16 rows) and column c0 + ldmatrix_bt_col for a column block c0 that
    // is a multiple of 16: chunk c0 / 8 plus the lane's 0 or 1, i.e. the lane's column-0 offset
    // with its chunk bits XOR-ed by the block's bytes (layout.cuh chunk_xor_offset_bytes). dQ's
    // K^T below is read the same way.
    const int bt_chunk = lane_chunk_bytes(ldmatrix_bt_row(lane), ldmatrix_bt_col(lane), kHeadDim);
    const int bt_lane = swizzled_offset(ldmatrix_bt_row(lane), ldmatrix_bt_col(lane), kHeadDim) * 2;
#pragma unroll
    for (int kk = 0; kk < Traits::kQuerySteps; ++kk) {
      u32 p_frag[kKeyMTiles][4], ds_frag[kKeyMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kKeyMTiles; ++mt) {
        p_frag[mt][0] = pack2<T>(st[mt][2 * kk][0], st[mt][2 * kk][1]);
        p_frag[mt][1] = pack2<T>(st[mt][2 * kk][2], st[mt][2 * kk][3]);
        p_frag[mt][2] = pack2<T>(st[mt][2 * kk + 1][0], st[mt][2 * kk + 1][1]);
        p_frag[mt][3] = pack2<T>(st[mt][2 * kk + 1][2], st[mt][2 * kk + 1][3]);
        ds_frag[mt][0] = pack2<T>(dpt[mt][2 * kk][0], dpt[mt][2 * kk][1]);
        ds_frag[mt][1] = pack2<T>(dpt[mt][2 * kk][2], dpt[mt][2 * kk][3]);
        ds_frag[mt][2] = pack2<T>(dpt[mt][2 * kk + 1][0], dpt[mt][2 * kk + 1][1]);
        ds_frag[mt][3] = pack2<T>(dpt[mt][2 * kk + 1][2], dpt[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kDimTiles / 2; ++dp) {
        // Head dim 96 (a 192-byte pitch) keeps the plain swizzle here: the XOR form holds the lane's
        // chunk apart in another register, which made ptxas spill at 168 registers on sm_80.
        const int bt_off =
            (kRowBytes & (kRowBytes - 1)) == 0
                ? chunk_xor_offset_bytes(bt_lane, bt_chunk, (dim_col0 + dp * 16) * 2, kHeadDim) + kk * 16 * kRowBytes
                : swizzled_offset(kk * 16 + ldmatrix_bt_row(lane), dim_col0 + dp * 16 + ldmatrix_bt_col(lane),
                                  kHeadDim) * 2;
        u32 do_frag[4], q_frag[4];
        ldmatrix_x4_trans(do_frag, do_tile + bt_off);
        ldmatrix_x4_trans(q_frag, q_tile + bt_off);
#pragma unroll
        for (int mt = 0; mt < kKeyMTiles; ++mt) {
          mma_16816<T>(dv_acc[mt][2 * dp], p_frag[mt], do_frag[0], do_frag[1]);
          mma_16816<T>(dv_acc[mt][2 * dp + 1], p_frag[mt], do_frag[2], do_frag[3]);
          mma_16816<T>(dk_acc[mt][2 * dp], ds_frag[mt], q_frag[0], q_frag[1]);
          mma_16816<T>(dk_acc[mt][2 * dp + 1], ds_frag[mt], q_frag[2], q_frag[3]);
        }
      }
    }
    __syncthreads();  // dS^T is complete

    // dQ += scale * dS K, in items of 16 query rows x kDqCols columns. dS (A, [query][key]) is
    // read transposed from the [key][query] tile; K (B, [key][d]) transposed from its tile, at
    // column blocks col0 + np * 16 as dO and Q above.
#pragma unroll 1
    for (int item = warp; item < Traits::kDqItems; item += Traits::kWarps) {
      const int q16 = item / (kHeadDim / Traits::kDqCols);
      const int col0 = (item % (kHeadDim / Traits::kDqCols)) * Traits::kDqCols;
      int kt_col[Traits::kDqCols / 16];
#pragma unroll
      for (int np = 0; np < Traits::kDqCols / 16; ++np)
        kt_col[np] = chunk_xor_offset_bytes(bt_lane, bt_chunk, (col0 + np * 16) * 2, kHeadDim);
      float dq[Traits::kDqCols / 8][4];
#pragma unroll
      for (int nt = 0; nt < Traits::kDqCols / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dq[nt][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < Traits::kKeySteps; ++kk) {
        u32 a[4];
        ldmatrix_x4_trans(a, ds_tile + ((kk * 16 + ldmatrix_b_row(lane)) * Traits::kDsPitch + q16 * 16 +
                                        ldmatrix_b_col(lane)) * 2);
#pragma unroll
        for (int np = 0; np < Traits::kDqCols / 16; ++np) {
          u32 b[4];
          ldmatrix_x4_trans(b, k_tile + kt_col[np] + kk * 16 * kRowBytes);
          mma_16816<T>(dq[2 * np], a, b[0], b[1]);
          mma_16816<T>(dq[2 * np + 1], a, b[2], b[3]);
        }
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int packed = block * kBlockM + q16 * 16 + acc_row(lane, 2 * half);
        if (packed >= packed_rows) continue;
        const PackedRow pr = unpack_row(packed, kGroup);
        // This lane's column pair of the item's first n8 tile; the others are constant offsets.
        float* dq_pair = params.dq_acc +
                         state_row(batch, params.q_heads, kv_head * kGroup + pr.head_in_group,
                                   state_pitch(params.state_len, params.q_len), pr.query_index) * kHeadDim +
                         (col0 + acc_col(lane, 0));
#pragma unroll
        for (int nt = 0; nt < Traits::kDqCols / 8; ++nt)
          red_add_f32x2(dq_pair + nt * 8, params.scale * dq[nt][2 * half], params.scale * dq[nt][2 * half + 1]);
      }
    }
    // No barrier here: the next tile writes the row table and dS^T only after its own barrier at
    // the top of the loop, which every warp reaches after this tile's last read of them.
  }
  cp_async_wait<0>();  // no group may outlive the CTA (only empty ones can be pending here)

  // ---- dK = scale * dS^T Q and dV = P^T dO of this step into the travelling accumulators ------
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int key_row0 = (warp % Traits::kKeyGroups) * Traits::kKeyRowsPerWarp;
  const int dim_col0 = (warp / Traits::kKeyGroups) * Traits::kDimColsPerWarp;
#pragma unroll
  for (int mt = 0; mt < kKeyMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int key_local = key_row0 + mt * 16 + acc_row(lane, 2 * half);
      if (key_local >= keys_here) continue;
      const long long row =
          ((static_cast<long long>(batch) * params.kv_heads + kv_head) * params.kv_len + key0 + key_local) *
          kHeadDim;
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        const int col = dim_col0 + d * 8 + acc_col(lane, 0);
        BwdFloatPair dk = {params.scale * dk_acc[mt][d][2 * half], params.scale * dk_acc[mt][d][2 * half + 1]};
        BwdFloatPair dv = {dv_acc[mt][d][2 * half], dv_acc[mt][d][2 * half + 1]};
        BwdFloatPair* dk_dst = reinterpret_cast<BwdFloatPair*>(params.dk_acc + row + col);
        BwdFloatPair* dv_dst = reinterpret_cast<BwdFloatPair*>(params.dv_acc + row + col);
        if (params.accumulate_dkv) {
          const BwdFloatPair dk_old = load_global(dk_dst), dv_old = load_global(dv_dst);
          dk.x += dk_old.x;
          dk.y += dk_old.y;
          dv.x += dv_old.x;
          dv.y += dv_old.y;
        }
        store_global(dk_dst, dk);
        store_global(dv_dst, dv);
      }
    }
}

}  // namespace device
}  // namespace cpgen
