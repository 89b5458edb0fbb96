// The sm_90a forward ring step: the contract of step_fwd.cuh (RingFwdParams, the running fp32
// state and its merge with its state_len row pitch, first/last step, causal skip by global
// positions, packed GQA rows, key intervals and softcap), with the tiles moved by TMA and
// multiplied by wgmma in a warp-specialized CTA (traits_wgmma.cuh):
//
//   producer warpgroup   thread 0: the Q tile once, then K/V tiles into a kStages ring; K and
//                        V of a stage each have a full barrier (the tile's bytes in, expect_tx)
//                        and an empty one (the consumers' releases out)
//   consumer warpgroup c rows 64c..64c+63 of the block, starting from their running state (m,
//                        l and o read while Q and the first K arrive); per key tile:
//                        S = Q K^T        wgmma, Q and K from shared (K-major, 128B swizzle;
//                                         64B at head dim 96)
//                        softcap          (kSoftcap) s = c tanh(scale q.k / c), before the mask
//                        mask             only tiles outside the mask-free run
//                        online softmax   log2 domain, in registers (softmax.cuh)
//                        O = O rescale + P V   wgmma, P from registers, V from shared (MN-major)
//                        K released once S has retired, V once P V has; at the end, the
//                        rows are the running state, written back (or out and lse on the
//                        last step) with no read in that tail
//
// Inside a consumer warpgroup the MMAs of one tile overlap the softmax of the next: S_(t+1) and
// O += P_t V_t are issued back to back, and the softmax of S_(t+1) runs while P_t V_t is still in
// flight. With kPingPong the two consumer warpgroups also take turns issuing those MMAs (CTA
// barriers 1 and 2), so one warpgroup's softmax runs while the tensor cores work on the other's
// tile. An epilogue through shared memory is the next refinement; none changes the contract.
//
// The key tiles a query block runs are step_fwd.cuh's (block_key_tiles, the same function): the
// producer loads exactly those, in the order the consumers take them, so stage phases match. A
// block that sees no key of the chunk loads nothing, not even Q: a middle step returns, the first
// writes the empty state and the last finalizes the state it has.
//
// With kPersistent a CTA runs many query blocks (work items, layout.cuh persistent_item) one
// after the other through the same stage ring, taking the next from the launch's work counter
// (wgmma_fwd_schedule): the producer loads the next item's Q and first tiles while the consumers
// finish the last item's P V and store, so an item's start and end are not left to the tensor
// cores' idle time between CTAs.
//
// Launch: grid as step_fwd.cuh (blocks of kBlockM packed rows, (batch, kv head) pairs folded
// over y and z), or with kPersistent grid.x = persistent_ctas(items, resident CTAs: one per SM),
// y = z = 1 and a second parameter, the zeroed work counter; block = Traits::kThreads, dynamic
// shared memory = Traits::kSharedBytes, and the RingFwdWgmmaParams maps built from
// q_map_description / kv_map_description (params_wgmma.cuh) with the traits' dtype, head dim,
// group, block_m and block_n. Requirements beyond those of
// step_fwd.cuh: q, k, v 16-byte aligned and every row, head and batch stride of them a multiple
// of 8 elements (TMA global strides are multiples of 16 bytes).
#pragma once

#include "cpgen/atomic.cuh"
#include "cpgen/hopper.cuh"
#include "cpgen/layout.cuh"
#include "cpgen/mask.cuh"
#include "cpgen/named_barrier.cuh"
#include "cpgen/params_wgmma.cuh"
#include "cpgen/shared_access.cuh"
#include "cpgen/softmax.cuh"
#include "cpgen/step_fwd.cuh"  // block_key_tiles: both families run the same key tiles
#include "cpgen/traits_wgmma.cuh"

namespace cpgen {
namespace device {

// Shared-window addresses of one CTA's tiles and barriers (traits_wgmma.cuh), from the base
// aligned up to 1024 bytes.
template <typename Traits>
struct WgmmaFwdShared {
  u32 base;
  CPGEN_DEVICE u32 q_tile() const { return base + Traits::kQOffset; }
  CPGEN_DEVICE u32 k_tile(int stage) const { return base + Traits::kKOffset + stage * Traits::kKvTileBytes; }
  CPGEN_DEVICE u32 v_tile(int stage) const { return base + Traits::kVOffset + stage * Traits::kKvTileBytes; }
  CPGEN_DEVICE u32 q_full() const { return base + Traits::kBarrierOffset; }
  CPGEN_DEVICE u32 q_empty() const { return base + Traits::kBarrierOffset + 8; }
  CPGEN_DEVICE u32 k_full(int stage) const { return barrier(0, stage); }
  CPGEN_DEVICE u32 v_full(int stage) const { return barrier(1, stage); }
  CPGEN_DEVICE u32 k_empty(int stage) const { return barrier(2, stage); }
  CPGEN_DEVICE u32 v_empty(int stage) const { return barrier(3, stage); }
  // After Q full and Q empty: four arrays of kStages barriers, in the order above.
  CPGEN_DEVICE u32 barrier(int array, int stage) const {
    return base + Traits::kBarrierOffset + 8 * (2 + array * Traits::kStages + stage);
  }
  // A persistent CTA's item handoff after them (wgmma_fwd_for_each_item): slot s's full and empty
  // barriers and the word that holds its item index.
  CPGEN_DEVICE u32 item_full(int slot) const { return barrier(4, 0) + 8 * slot; }
  CPGEN_DEVICE u32 item_empty(int slot) const { return barrier(4, 0) + 16 + 8 * slot; }
  CPGEN_DEVICE u32 item_index(int slot) const { return barrier(4, 0) + 32 + 4 * slot; }
};

// One thread initializes every barrier; a __syncthreads must follow before any other uses them.
template <typename Traits>
CPGEN_DEVICE void wgmma_fwd_init_barriers(const WgmmaFwdShared<Traits>& smem) {
  mbarrier_init(smem.q_full(), 1);
  mbarrier_init(smem.q_empty(), 128 * Traits::kConsumers);
#pragma unroll
  for (int s = 0; s < Traits::kStages; ++s) {
    mbarrier_init(smem.k_full(s), 1);
    mbarrier_init(smem.v_full(s), 1);
    mbarrier_init(smem.k_empty(s), 128 * Traits::kConsumers);  // every consumer thread releases
    mbarrier_init(smem.v_empty(s), 128 * Traits::kConsumers);
  }
  if constexpr (Traits::kPersistent) {
#pragma unroll
    for (int slot = 0; slot < 2; ++slot) {
      mbarrier_init(smem.item_full(slot), 1);                              // the scheduler's hand-over
      mbarrier_init(smem.item_empty(slot), 128 * Traits::kConsumers + 1);  // the loader and every consumer read it
    }
  }
  fence_proxy_async();  // the initialized barriers are visible to the TMA unit's complete_tx
}

// One K or V tile (keys key0 .. key0 + kBlockN - 1) into `tile`, its bytes counted on `full`.
template <typename Traits>
CPGEN_DEVICE void wgmma_fwd_load_tile(const TmaMap& map, u32 tile, u32 full, int key0, int kv_head, int batch) {
  mbarrier_arrive_expect_tx(full, Traits::kKvTileBytes);
#pragma unroll
  for (int b = 0; b < Traits::kColumnBlocks; ++b) {
    const int coords[4] = {b * Traits::kColumnElements, key0, kv_head, batch};
    tma_load<4>(tile + b * Traits::kBlockN * Traits::kSwizzleBytes, map, coords, full);
  }
}

// One work item of a CTA: query block m_block of the (batch, kv head) pair, its key tiles, and
// where it starts in the CTA's sequences: `run0` tiles went through the stage ring before it and
// `q_load` Q tiles were loaded before its own (both 0 unless the kernel is persistent).
struct WgmmaFwdItem {
  int batch;
  int kv_head;
  int m_block;
  KeyTiles tiles;
  int run0;
  int q_load;
};

// Work item `index` of a persistent launch (layout.cuh, persistent_item): its block, pair and key
// tiles. False when it has nothing to do: a middle step's block that sees no key of the chunk (a
// first step still writes the empty state, a last one finalizes the state it has).
template <typename Traits>
CPGEN_DEVICE bool wgmma_fwd_persistent_item(const RingFwdParams& params, int section_pairs, int index,
                                            WgmmaFwdItem& item) {
  const int blocks = (params.q_len * Traits::kGroup + Traits::kBlockM - 1) / Traits::kBlockM;
  const PersistentItem at = persistent_item(index, blocks, params.batch, params.kv_heads, section_pairs);
  item.batch = at.batch;
  item.kv_head = at.kv_head;
  item.m_block = at.m_block;
  item.tiles = block_key_tiles<Traits>(params, at.m_block);
  return item.tiles.end > item.tiles.begin || params.is_first_step || params.is_last_step;
}

// The scheduler's next item after `index`: gridDim.x + the work counter's old value as it takes one
// (each item past the grid's first is taken once, in order, by whichever CTA asks first), or
// without a counter the next of this CTA's fixed stride.
CPGEN_DEVICE int wgmma_fwd_next_item(unsigned* work_counter, int index) {
  return work_counter ? static_cast<int>(gridDim.x + atomic_add_u32(work_counter, 1u)) : index + static_cast<int>(gridDim.x);
}

// After a visited item: the stage ring and the Q tile count move on by what it loaded.
CPGEN_DEVICE void wgmma_fwd_advance(WgmmaFwdItem& item) {
  const int tile_count = item.tiles.end - item.tiles.begin;
  if (tile_count > 0) {
    item.run0 += tile_count;
    ++item.q_load;
  }
}

// A persistent CTA's scheduler (one thread of the producer warpgroup, beside the one that issues
// the loads): starts at item blockIdx.x and then takes items in order from the launch's work
// counter (wgmma_fwd_next_item), so a CTA that finishes early takes more and the launch's end is
// not decided by a fixed share per CTA; without a counter (a null pointer) it steps by gridDim.x.
// It hands each item to the loader and the consumers through two slots in shared memory (the
// index, then an arrive on the slot's full barrier; they wait there, read it and arrive on its
// empty barrier, which the scheduler waits for before the slot's next use), and hands over -1 at
// the end; they skip the items that have nothing to do. A thread of its own: the loader taking
// the items itself spilled 116-180 bytes in the producer's 24 registers, apart they spilled 32,
// and with 32 registers (a persistent kernel's plan, traits_wgmma.cuh) none.
template <typename Traits>
CPGEN_DEVICE void wgmma_fwd_schedule(const RingFwdParams& params, unsigned* work_counter,
                                     const WgmmaFwdShared<Traits>& smem) {
  // Item indices fit an int (runtime/backend/launch_grid.cpp refuses a launch of more).
  const int blocks = (params.q_len * Traits::kGroup + Traits::kBlockM - 1) / Traits::kBlockM;
  const int items = blocks * params.batch * params.kv_heads;
  int index = blockIdx.x;
  for (int handed = 0;; ++handed) {
    const int slot = handed & 1;
    // The slot's last item (two hand-overs ago) has been read by the loader and every consumer.
    if (handed >= 2) mbarrier_wait_parity(smem.item_empty(slot), ((handed >> 1) - 1) & 1);
    store_shared_u32(smem.item_index(slot), static_cast<unsigned>(index < items ? index : -1));
    mbarrier_arrive(smem.item_full(slot));  // releases the index to their waits
    if (index >= items) return;
    index = wgmma_fwd_next_item(work_counter, index);
  }
}

// Calls visit(item) for each work item of this CTA that has something to do: the CTA's own query
// block, or with kPersistent those of the items the scheduler hands over (wgmma_fwd_schedule), in
// its order. The loader and the consumers see the same items in the same order, so their run and Q
// counts agree. `own` is the block of a non-persistent launch, which the kernel has already found
// worth running.
template <typename Traits, typename Visit>
CPGEN_DEVICE void wgmma_fwd_for_each_item(const RingFwdParams& params, int section_pairs,
                                          const WgmmaFwdShared<Traits>& smem, const WgmmaFwdItem& own, Visit&& visit) {
  if constexpr (Traits::kPersistent) {
    WgmmaFwdItem item{};
    for (int taken = 0;; ++taken) {
      const int slot = taken & 1;
      mbarrier_wait_parity(smem.item_full(slot), (taken >> 1) & 1);
      const int index = static_cast<int>(load_shared_u32(smem.item_index(slot)));
      mbarrier_arrive(smem.item_empty(slot));
      if (index < 0) return;
      if (!wgmma_fwd_persistent_item<Traits>(params, section_pairs, index, item)) continue;
      visit(item);
      wgmma_fwd_advance(item);
    }
  } else {
    (void)smem;
    visit(own);
  }
}

// Producer: one thread issues every copy. A K or V tile is kColumnBlocks boxes of (C columns,
// kBlockN keys), column block b at b * kBlockN * W bytes; Q likewise with kBlockM rows
// (traits_wgmma.cuh: W the swizzle line, C its elements).
// The item's tiles go through the stage ring in order, continuing the CTA's count: run r (from
// the CTA's first item) uses stage r % kStages, the order the consumers wait in. K of run r waits
// only for the release of K of run r - kStages (its S retired), so with 2 stages K_(t+2) loads
// while P_t V_t still runs; V of run r waits for V of run r - kStages (its P V retired). The Q
// tile of a persistent CTA's next item waits for the consumers' release of the last one (its
// last S retired), so it loads while they finish that item's P V and store.
template <typename Traits>
CPGEN_DEVICE void wgmma_fwd_produce(const RingFwdWgmmaParams& params, const WgmmaFwdShared<Traits>& smem,
                                    const WgmmaFwdItem& item) {
  constexpr int kGroup = Traits::kGroup;
  const int tiles = item.tiles.end - item.tiles.begin;
  if (tiles <= 0) return;
  if (item.q_load > 0) mbarrier_wait_parity(smem.q_empty(), (item.q_load - 1) & 1);
  mbarrier_arrive_expect_tx(smem.q_full(), Traits::kQTileBytes);
  const int first_packed = item.m_block * Traits::kBlockM;
#pragma unroll
  for (int b = 0; b < Traits::kColumnBlocks; ++b) {
    const int coords[4] = {b * Traits::kColumnElements, item.kv_head * kGroup, first_packed / kGroup, item.batch};
    tma_load<4>(smem.q_tile() + b * Traits::kBlockM * Traits::kSwizzleBytes, params.q_map, coords, smem.q_full());
  }
  for (int run = 0; run < tiles; ++run) {
    const int r = item.run0 + run;
    const int stage = r % Traits::kStages, round = r / Traits::kStages;
    const int key0 = (item.tiles.begin + run) * Traits::kBlockN;
    // Round n of a stage reuses it after the consumers released round n - 1 (phase n - 1).
    if (round > 0) mbarrier_wait_parity(smem.k_empty(stage), (round - 1) & 1);
    wgmma_fwd_load_tile<Traits>(params.k_map, smem.k_tile(stage), smem.k_full(stage), key0, item.kv_head, item.batch);
    if (round > 0) mbarrier_wait_parity(smem.v_empty(stage), (round - 1) & 1);
    wgmma_fwd_load_tile<Traits>(params.v_map, smem.v_tile(stage), smem.v_full(stage), key0, item.kv_head, item.batch);
  }
}

// The running state of this thread's rows as the starting point of the online softmax: o the
// state's fp32 accumulator, row_max its m, row_sum its l (on the quad leader only: row_sum is a
// per-lane partial that the store sums over the quad). Tiles then add to it exactly as to a state
// of their own, so the state is read while the item's first scores are computed instead of in a
// load-merge-store tail after its last P V, where no MMA of the CTA hides the latency. The first
// step and rows past the queries start empty: m = -inf, l = 0, o = 0. o[4 j + e] is row
// row0 + acc_row(lane, e), column 8 j + acc_col(lane, e).
template <typename Traits>
CPGEN_DEVICE void wgmma_fwd_load_state(const RingFwdParams& params, int batch, int kv_head, int row0,
                                       float (&o)[Traits::kOutputRegisters], float (&row_max)[2],
                                       float (&row_sum)[2]) {
  constexpr int kGroup = Traits::kGroup;
  constexpr int kHeadDim = Traits::kHeadDim;
#pragma unroll
  for (int i = 0; i < Traits::kOutputRegisters; ++i) o[i] = 0.0f;
  row_max[0] = row_max[1] = -positive_infinity();
  row_sum[0] = row_sum[1] = 0.0f;
  if (params.is_first_step) return;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int packed = row0 + acc_row(lane, 2 * half);
    if (packed >= params.q_len * kGroup) continue;
    const long long row = row_place<kGroup>(params, batch, kv_head, packed).state;
    row_max[half] = load_global(params.m_state + row);
    if (lane % 4 == 0) row_sum[half] = load_global(params.l_state + row);
    const float* o_state = params.o_state + row * kHeadDim;
    // A thread's two columns are adjacent (acc_col is even): one 8-byte load per pair (state rows
    // are head_dim floats from an aligned allocation, so every pair is 8-byte aligned).
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j) {
      const FloatPair saved = load_global(reinterpret_cast<const FloatPair*>(o_state + 8 * j + acc_col(lane, 0)));
      o[4 * j + 2 * half] = saved.x;
      o[4 * j + 2 * half + 1] = saved.y;
    }
  }
}

// Writes this thread's rows back as the running state (o, m, l), or on the last step as out =
// o / l and lse (step_fwd.cuh's epilogue for one 16-row tile per warp). The state these rows
// started from (wgmma_fwd_load_state) is already in o, row_max and row_sum.
template <typename Traits>
CPGEN_DEVICE void wgmma_fwd_store_state(const RingFwdParams& params, int batch, int kv_head, int row0,
                                        const float (&o)[Traits::kOutputRegisters], const float (&row_max)[2],
                                        const float (&row_sum)[2]) {
  using T = typename Traits::Element;
  constexpr int kGroup = Traits::kGroup;
  constexpr int kHeadDim = Traits::kHeadDim;
  const int packed_rows = params.q_len * kGroup;
  const int lane = threadIdx.x % 32;
  const bool quad_leader = lane % 4 == 0;
  // Every lane of a quad read the row's m (and the leader its l) in wgmma_fwd_load_state; the
  // leader overwrites them only after this barrier. The warpgroup's MMAs in between make the
  // lanes meet, but they order no memory accesses; __syncwarp does.
  __syncwarp();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int packed = row0 + acc_row(lane, 2 * half);
    const float l = quad_sum(row_sum[half]);  // every lane of the quad takes part
    if (packed >= packed_rows) continue;
    const RowPlace place = row_place<kGroup>(params, batch, kv_head, packed);
    const long long row = place.state;
    if (params.is_last_step) {
      const float inv_l = output_scale(l);
      char* out_row = static_cast<char*>(params.out) + place.out * 2;
#pragma unroll
      for (int j = 0; j < kHeadDim / 8; ++j) {
        const int col = 8 * j + acc_col(lane, 0);
        store_global(reinterpret_cast<u32*>(out_row + col * 2),
                     pack2<T>(inv_l * o[4 * j + 2 * half], inv_l * o[4 * j + 2 * half + 1]));
      }
      if (quad_leader) store_global(params.lse + row, lse_natural(row_max[half], l));
    } else {
      float* o_state = params.o_state + row * kHeadDim;
#pragma unroll
      for (int j = 0; j < kHeadDim / 8; ++j) {
        const FloatPair pair = {o[4 * j + 2 * half], o[4 * j + 2 * half + 1]};
        store_global(reinterpret_cast<FloatPair*>(o_state + 8 * j + acc_col(lane, 0)), pair);
      }
      if (quad_leader) {
        store_global(params.m_state + row, row_max[half]);
        store_global(params.l_state + row, l);
      }
    }
  }
}

// S = Q K^T of one K tile as one committed wgmma group (not waited for). Q and K are K-major in
// the W-byte swizzle: 8-row atoms 8 W bytes apart (SBO), k stepping 32 bytes (16 elements)
// inside the W-byte line, the next column block every W / 32 k-steps (tile rows x W bytes on).
template <typename Traits>
CPGEN_DEVICE void wgmma_fwd_issue_scores(float (&s)[Traits::kScoreRegisters], u32 q_rows, u32 k_tile) {
  using T = typename Traits::Element;
  constexpr int kSteps = Traits::kKStepsPerBlock, kW = Traits::kSwizzleBytes;
  // One descriptor per operand; each k-step advances its start address by a constant.
  const u64 q_desc = wgmma_descriptor(q_rows, 16, 8 * kW, Traits::kDescriptorSwizzle);
  const u64 k_desc = wgmma_descriptor(k_tile, 16, 8 * kW, Traits::kDescriptorSwizzle);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Traits::kQkSteps; ++kk) {
    const unsigned q_step = (kk / kSteps) * Traits::kBlockM * kW + (kk % kSteps) * 32;
    const unsigned k_step = (kk / kSteps) * Traits::kBlockN * kW + (kk % kSteps) * 32;
    wgmma_ss<T, Traits::kBlockN>(s, wgmma_descriptor_advance(q_desc, q_step), wgmma_descriptor_advance(k_desc, k_step),
                                 kk > 0);
  }
  wgmma_commit();
}

// Softcaps (kSoftcap) and masks the raw scores of key tile `tile`, then runs the online softmax
// over them in place: s becomes p = exp2(s scale_log2 - m), row_max and row_sum advance, rescale
// gets exp2(m_old - m_new) for O. The mask (keys past kv_len; causal: keys after the row's query;
// key intervals: keys outside [q_key_first, q_key_last]) applies only to tiles outside the
// block's mask-free run [full_begin, full_end). Positions increase along the chunk, so the keys
// of a tile a row sees are one index run of it, found by binary searches over the tile's
// positions (mask.cuh), exactly as step_fwd.cuh finds them.
template <typename Traits>
CPGEN_DEVICE void wgmma_fwd_softmax(const RingFwdParams& params, float (&s)[Traits::kScoreRegisters], int tile,
                                    const KeyTiles& tiles, int row0, float (&row_max)[2], float (&row_sum)[2],
                                    float (&rescale)[2]) {
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kGroup = Traits::kGroup;
  constexpr bool kKeyIntervals = Traits::kKeyIntervals;
  const int lane = threadIdx.x % 32;
  const int key0 = tile * kBlockN;
  // Softcap first, so that a masked score below still becomes -inf (tanh(-inf) would give -c):
  // c tanh(scale q.k / c) enters the log2-domain softmax as (c log2 e) tanh(q.k (scale / c)); s
  // keeps the tanh and the softmax scales by c log2 e in place of scale log2 e. Multiplying by
  // c log2 e here instead (as step_fwd.cuh does) took the consumers from 183 to 237 registers
  // at head dim 128 (SASS, ptxas of NVRTC 13.0); folded into the softmax it costs none.
  if constexpr (Traits::kSoftcap) {
    const float tanh_scale = params.scale_log2 * 0.6931471805599453f / params.softcap;
#pragma unroll
    for (int i = 0; i < Traits::kScoreRegisters; ++i) s[i] = softcap_tanh(s[i] * tanh_scale);
  }
  if ((kKeyIntervals && tile < tiles.full_begin) || tile >= tiles.full_end) {
    const int keys_here = min(kBlockN, params.kv_len - key0);
    int row_key_begin[2], row_key_end[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      row_key_begin[half] = key0;
      row_key_end[half] = key0 + keys_here;
      if constexpr (Traits::kCausal || kKeyIntervals) {
        const RowKeys keys = row_tile_keys<Traits>(params, key0, keys_here, row0 + acc_row(lane, 2 * half));
        row_key_begin[half] = keys.begin;
        row_key_end[half] = keys.end;
      }
    }
#pragma unroll
    for (int i = 0; i < Traits::kScoreRegisters; ++i) {
      const int key = key0 + 8 * (i / 4) + acc_col(lane, i % 4);
      const int half = i % 4 / 2;
      const bool before = kKeyIntervals && key < row_key_begin[half];
      if (before || key >= row_key_end[half]) s[i] = -positive_infinity();
    }
  }
  // The accumulator order (8-column blocks of 4 registers, rows g and g + 8) is the mma.sync one
  // softmax.cuh works on, as one 16-row tile per warp.
  float step_rescale[1][2];
  online_softmax_tile<1, kBlockN / 8>(*reinterpret_cast<float(*)[1][kBlockN / 8][4]>(&s),
                                      *reinterpret_cast<float(*)[1][2]>(&row_max),
                                      *reinterpret_cast<float(*)[1][2]>(&row_sum), step_rescale,
                                      Traits::kSoftcap ? params.softcap * 1.4426950408889634f
                                                       : params.scale_log2);
  rescale[0] = step_rescale[0][0];
  rescale[1] = step_rescale[0][1];
}

// P in 16 bits as the A fragments of O += P V: keys 16kk..16kk+15 are accumulator blocks 2kk and
// 2kk + 1, which is exactly the register A layout of k-step kk (hopper.cuh wgmma_rs).
template <typename Traits>
CPGEN_DEVICE void wgmma_fwd_pack(const float (&s)[Traits::kScoreRegisters], u32 (&p)[Traits::kPvSteps][4]) {
  using T = typename Traits::Element;
#pragma unroll
  for (int kk = 0; kk < Traits::kPvSteps; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) p[kk][r] = pack2<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}

// O += P V as one committed wgmma group: V is MN-major, 8 keys per 8 W-byte atom (SBO), the
// output's column blocks kBlockN x W bytes apart (LBO); k-step kk starts 16 keys (16 W bytes) on.
template <typename Traits>
CPGEN_DEVICE void wgmma_fwd_issue_pv(float (&o)[Traits::kOutputRegisters], const u32 (&p)[Traits::kPvSteps][4],
                                     u32 v_tile) {
  using T = typename Traits::Element;
  const u64 v_desc = wgmma_descriptor(v_tile, Traits::kBlockN * Traits::kSwizzleBytes, 8 * Traits::kSwizzleBytes,
                                      Traits::kDescriptorSwizzle);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Traits::kPvSteps; ++kk)
    wgmma_rs<T, Traits::kHeadDim, true>(o, p[kk], wgmma_descriptor_advance(v_desc, kk * 16 * Traits::kSwizzleBytes),
                                        true);
  wgmma_commit();
}

// Ping-pong turns (kPingPong; no-ops otherwise). Consumer c issues the MMAs of an issue point
// (the first S, each loop iteration's S and P V, the last P V) only in its turn, which opens when
// the other consumer arrives at barrier kTurnBarrier + c, and hands the turn over as soon as they
// are issued. The tensor cores then take the two warpgroups' MMAs in alternation, and each
// warpgroup's softmax runs while the other's MMAs do. Both consumers run the same tiles, so each
// has tile_count + 1 turns; consumer 1 opens consumer 0's first turn and leaves out its own last
// hand-over, so every barrier phase pairs 128 syncs with 128 arrivals and none is left open.
template <typename Traits>
CPGEN_DEVICE void wgmma_fwd_take_turn(int consumer) {
  if constexpr (Traits::kPingPong) named_barrier_sync(Traits::kTurnBarrier + consumer, Traits::kTurnThreads);
}
template <typename Traits>
CPGEN_DEVICE void wgmma_fwd_pass_turn(int consumer) {
  if constexpr (Traits::kPingPong) named_barrier_arrive(Traits::kTurnBarrier + 1 - consumer, Traits::kTurnThreads);
}

// One consumer warpgroup's share of one item: its 64 rows' running state in, every key tile, the
// state out.
// Per key tile: issue S_(t+1) = Q K_(t+1)^T and O += P_t V_t back to back in this consumer's turn
// (wgmma_fwd_take_turn), pass the turn, wait for S, run its softmax, wait for P V, then rescale O
// and pack P_(t+1). The tensor core is kept busy across the two consumers: while one runs its
// softmax, the other's MMAs run. P_t stays untouched while its wgmma may read it. Runs count the
// tiles through the stage ring over the CTA's items: run r (the item's first is run0) is tile
// tiles.begin + r - run0 in stage r % kStages, as the producer loads them.
//
// Measured: ptxas hoists the wait for P_t V_t above this softmax (it wants the packs of P_(t+1),
// which overwrite the registers P_t V_t reads, interleaved with the exps), so inside one
// warpgroup the MMAs and the softmax take turns. 4e918ba made them overlap (the wait for V_(t+1)
// between the softmax and that wait, O's rescale moved between the issues of S and P V, where
// FlashAttention-3 has it; 66 of 66 exps before the wait in the SASS). On an H200 that order was
// slower in every configuration: bf16/fp16 head dim 128, 8K and 16K, causal and full, plain
// launch 0.90-0.93x cuDNN against 0.93-0.99x with this order, ping-pong 0.91-0.99x against
// 0.94-0.99x, with the mma.sync family within 1% and cuDNN within 2% across the two runs
// (bench/results/2026-11-27-NVIDIA-H200-gpu-check-persistent-raw.md and 2026-11-28-NVIDIA-H200-
// gpu-check.md), and the non-causal kernel's SASS differing from 6bd0c35's only by that commit.
template <typename Traits>
CPGEN_DEVICE void wgmma_fwd_consume(const RingFwdParams& params, const WgmmaFwdShared<Traits>& smem, int consumer,
                                    const WgmmaFwdItem& item) {
  constexpr int kStages = Traits::kStages;
  const KeyTiles& tiles = item.tiles;
  const int tile_count = tiles.end - tiles.begin;
  const int thread = threadIdx.x % 128;
  // This thread's accumulator rows: acc_row(lane, e) within the warp's 16 rows.
  const int row0 = item.m_block * Traits::kBlockM + 64 * consumer + 16 * (thread / 32);

  // The running state these rows start from (wgmma_fwd_load_state): read while the first S runs.
  float o[Traits::kOutputRegisters];
  float row_max[2], row_sum[2];

  // This warpgroup's 64 rows of the Q tile (8 atoms of 8 W bytes in each column block).
  const u32 q_rows = smem.q_tile() + 64 * consumer * Traits::kSwizzleBytes;

  u32 p[Traits::kPvSteps][4];
  if (tile_count > 0) {
    const int stage = item.run0 % kStages;
    if (consumer == 1) wgmma_fwd_pass_turn<Traits>(consumer);  // consumer 0 goes first
    // The state's loads run while Q and K arrive and S is computed (o is not touched again
    // until its rescale after the first softmax).
    wgmma_fwd_load_state<Traits>(params, item.batch, item.kv_head, row0, o, row_max, row_sum);
    mbarrier_wait_parity(smem.q_full(), item.q_load & 1);  // no Q is loaded for an item without tiles
    mbarrier_wait_parity(smem.k_full(stage), (item.run0 / kStages) & 1);
    float s[Traits::kScoreRegisters];
    wgmma_fwd_take_turn<Traits>(consumer);
    wgmma_fwd_issue_scores<Traits>(s, q_rows, smem.k_tile(stage));
    wgmma_fwd_pass_turn<Traits>(consumer);
    wgmma_wait<0>();
    wgmma_fence_operand(s);
    mbarrier_arrive(smem.k_empty(stage));  // this thread's S of the item's first K tile has retired
    float rescale[2];
    wgmma_fwd_softmax<Traits>(params, s, tiles.begin, tiles, row0, row_max, row_sum, rescale);
    // The state's o to the new max, before P_0 V_0 adds to it.
#pragma unroll
    for (int i = 0; i < Traits::kOutputRegisters; ++i) o[i] *= rescale[i % 4 / 2];
    wgmma_fwd_pack<Traits>(s, p);
  } else {
    wgmma_fwd_load_state<Traits>(params, item.batch, item.kv_head, row0, o, row_max, row_sum);
  }
  // The last tile runs outside the loop, so the loop body has no branch around its wgmma groups
  // (ptxas serializes the pipeline when it cannot tell which group a register belongs to).
  // The loop counts runs r of the stage ring, bounded by the item's last one. Counted from 0 and
  // bounded by the tile count instead, its bound lived in local memory at head dim 128 with a
  // causal mask and a softcap (16 bytes spilled, reloaded every tile; NVRTC 13.0).
  const int tile_shift = tiles.begin + 1 - item.run0;  // pass r scores tile r + tile_shift (run r + 1)
  const int last_run = item.run0 + tile_count - 1;
  for (int r = item.run0; r < last_run; ++r) {
    const int stage = r % kStages, next_stage = (r + 1) % kStages;
    float s[Traits::kScoreRegisters];
    mbarrier_wait_parity(smem.k_full(next_stage), ((r + 1) / kStages) & 1);
    mbarrier_wait_parity(smem.v_full(stage), (r / kStages) & 1);  // in long ago, but not waited for
    wgmma_fwd_take_turn<Traits>(consumer);
    wgmma_fwd_issue_scores<Traits>(s, q_rows, smem.k_tile(next_stage));
    wgmma_fwd_issue_pv<Traits>(o, p, smem.v_tile(stage));
    wgmma_fwd_pass_turn<Traits>(consumer);
    wgmma_wait<1>();  // groups retire in order: the scores (older) are in, P V may still run
    wgmma_fence_operand(s);
    mbarrier_arrive(smem.k_empty(next_stage));  // K_(t+1) is read: its stage may take K_(t+1+kStages)
    float rescale[2];
    wgmma_fwd_softmax<Traits>(params, s, r + tile_shift, tiles, row0, row_max, row_sum, rescale);
    wgmma_wait<0>();
    wgmma_fence_operand(o);
    mbarrier_arrive(smem.v_empty(stage));  // this thread's P V of the stage has retired
    // O = O exp2(m_t - m_(t+1)) before P_(t+1) V_(t+1) adds to it, skipped (a warp-uniform
    // branch) where no row of the warp moved its m: with softmax.cuh's kMaxLag that is almost
    // every tile after the first, and saves 64 FMULs between the wait for P V and the next issue.
    if (__any_sync(0xffffffffu, rescale[0] != 1.0f || rescale[1] != 1.0f)) {
#pragma unroll
      for (int i = 0; i < Traits::kOutputRegisters; ++i) o[i] *= rescale[i % 4 / 2];
    }
    wgmma_fwd_pack<Traits>(s, p);
  }
  if (tile_count > 0) {
    const int r = item.run0 + tile_count - 1;
    const int stage = r % kStages;
    // Every S of the item has retired: a persistent CTA's producer may load the next Q.
    if constexpr (Traits::kPersistent) mbarrier_arrive(smem.q_empty());
    mbarrier_wait_parity(smem.v_full(stage), (r / kStages) & 1);
    wgmma_fwd_take_turn<Traits>(consumer);
    wgmma_fwd_issue_pv<Traits>(o, p, smem.v_tile(stage));
    if (consumer == 0) wgmma_fwd_pass_turn<Traits>(consumer);  // consumer 1's last turn is the last
    wgmma_wait<0>();
    wgmma_fence_operand(o);
    mbarrier_arrive(smem.v_empty(stage));
  }

  wgmma_fwd_store_state<Traits>(params, item.batch, item.kv_head, row0, o, row_max, row_sum);
}

// work_counter: a persistent launch's zeroed counter of taken items (wgmma_fwd_for_each_item; null:
// a fixed stride); unused otherwise.
template <typename Traits>
CPGEN_DEVICE void ring_fwd_step_wgmma(const RingFwdWgmmaParams& wparams, unsigned* work_counter = nullptr) {
  const RingFwdParams& params = wparams.base;

  extern __shared__ __align__(128) unsigned char shared_storage[];

  // A non-persistent CTA's one item; a persistent CTA finds its items in the loop.
  WgmmaFwdItem own{};
  if constexpr (!Traits::kPersistent) {
    // The fold of the pairs over (y, z) leaves up to z - 1 blocks past the last pair.
    const long long pair = unfold_pair(blockIdx.y, blockIdx.z, gridDim.y);
    if (pair >= static_cast<long long>(params.batch) * params.kv_heads) return;
    const BatchHead at = unfold_batch_head(blockIdx.y, blockIdx.z, gridDim.y, params.kv_heads);
    own.batch = at.batch;
    own.kv_head = at.kv_head;
    own.m_block = query_block();
    // Key tiles this query block runs: [begin, end), of which [full_begin, full_end) need no mask.
    own.tiles = block_key_tiles<Traits>(params, own.m_block);
    // A block that sees nothing here has nothing to merge into a middle step's state (every
    // thread leaves before any barrier exists).
    if (own.tiles.end <= own.tiles.begin && !params.is_first_step && !params.is_last_step) return;
  }

  const WgmmaFwdShared<Traits> smem{(shared_address(shared_storage) + 1023u) & ~1023u};
  if (threadIdx.x == 0) wgmma_fwd_init_barriers<Traits>(smem);
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    setmaxnreg_dec<Traits::kProducerRegisters>();
    if (threadIdx.x == 0) {
      wgmma_fwd_for_each_item<Traits>(params, wparams.section_pairs, smem, own,
                                      [&](const WgmmaFwdItem& item) { wgmma_fwd_produce<Traits>(wparams, smem, item); });
    } else if (Traits::kPersistent && threadIdx.x == 32) {
      wgmma_fwd_schedule<Traits>(params, work_counter, smem);
    }
    return;
  }
  setmaxnreg_inc<Traits::kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  wgmma_fwd_for_each_item<Traits>(params, wparams.section_pairs, smem, own, [&](const WgmmaFwdItem& item) {
    wgmma_fwd_consume<Traits>(params, smem, consumer, item);
  });
}

}  // namespace device
}  // namespace cpgen
