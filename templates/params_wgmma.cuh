// Kernel parameters of the sm_90a forward step (step_fwd_wgmma.cuh): the mma.sync kernel's
// RingFwdParams plus one tensor map per input, and the description each map is built from.
//
// On the GPU the struct is the kernel's `const __grid_constant__` parameter, so the maps sit in
// parameter space where cp.async.bulk.tensor may read them; the backend fills each map with
// cuTensorMapEncodeTiled. Under the emulator the same struct holds maps made by
// emulation::encode_tensor_map_tiled. Both take their arguments from the *_map_description
// functions below, so the two can never disagree about dims, strides or boxes.
#pragma once

#include "cpgen/hopper.cuh"
#include "cpgen/params.cuh"

namespace cpgen {

struct RingFwdWgmmaParams {
  RingFwdParams base;
  device::TmaMap q_map;
  device::TmaMap k_map;
  device::TmaMap v_map;
  // The persistent launch's pairs per L2 section (layout.cuh persistent_item); other launches
  // ignore it. runtime/backend/wgmma_params.h sets it from the device's L2 size.
  int section_pairs;
};

// The arguments of cuTensorMapEncodeTiled (and of the emulator's encoder) for one map: element
// strides 1, no interleave, zero fill out of bounds, no L2 promotion requirements.
struct TmaMapDescription {
  const void* global;
  unsigned data_type;  // CUtensorMapDataType: 9 bfloat16, 6 float16
  unsigned rank;
  uint64_t dims[5];     // innermost first, in elements
  uint64_t strides[4];  // bytes between neighbours along dims 1..rank-1
  unsigned box[5];
  unsigned swizzle;  // CUtensorMapSwizzle: 3 = 128B
};

namespace device {

constexpr unsigned kTmaDataBf16 = 9;
constexpr unsigned kTmaDataFp16 = 6;
constexpr unsigned kTmaSwizzle64B = 2;
constexpr unsigned kTmaSwizzle128B = 3;

// The tiles are cut along the head dim into column blocks of one swizzle line each: 128 bytes
// (64 elements) when the head dim is a multiple of 64, else 64 bytes (32 elements; head dim 96 is
// three such blocks). Each block is one TMA box row, and the swizzle both TMA and wgmma apply.
CPGEN_HOST_DEVICE constexpr int wgmma_swizzle_bytes(int head_dim) { return head_dim % 64 == 0 ? 128 : 64; }
CPGEN_HOST_DEVICE constexpr unsigned wgmma_tma_swizzle(int head_dim) {
  return wgmma_swizzle_bytes(head_dim) == 128 ? kTmaSwizzle128B : kTmaSwizzle64B;
}

// Q as (head_dim, query head, query, batch). Packed row p of a block is query head
// kv_head * G + p % G at query p / G (layout.cuh), i.e. heads vary fastest; a box of
// (one column block, G heads, block_m / G queries) lands in shared memory with the heads inside the
// queries, which is exactly packed-row order: one TMA copy per column block loads the whole
// packed tile, and queries past q_len are zero-filled by the bounds check. The dims need not be
// in memory order (each has its own stride), which is what makes the interleave expressible.
CPGEN_HOST_DEVICE TmaMapDescription q_map_description(const RingFwdParams& p, bool bf16, int head_dim, int group,
                                                      int block_m) {
  TmaMapDescription d{};
  d.global = p.q;
  d.data_type = bf16 ? kTmaDataBf16 : kTmaDataFp16;
  d.rank = 4;
  d.dims[0] = static_cast<uint64_t>(head_dim);
  d.dims[1] = static_cast<uint64_t>(p.q_heads);
  d.dims[2] = static_cast<uint64_t>(p.q_len);
  d.dims[3] = static_cast<uint64_t>(p.batch);
  d.strides[0] = static_cast<uint64_t>(p.q_head_stride) * 2;
  d.strides[1] = static_cast<uint64_t>(p.q_row_stride) * 2;
  d.strides[2] = static_cast<uint64_t>(p.q_batch_stride) * 2;
  d.box[0] = static_cast<unsigned>(wgmma_swizzle_bytes(head_dim) / 2);
  d.box[1] = static_cast<unsigned>(group);
  d.box[2] = static_cast<unsigned>(block_m / group);
  d.box[3] = 1;
  d.swizzle = wgmma_tma_swizzle(head_dim);
  return d;
}

// K or V as (head_dim, key, kv head, batch), boxes of (one column block, block_n keys); keys past
// kv_len (the partial last tile) are zero-filled.
CPGEN_HOST_DEVICE TmaMapDescription kv_map_description(const RingFwdParams& p, bool is_v, bool bf16, int head_dim,
                                                       int block_n) {
  TmaMapDescription d{};
  d.global = is_v ? p.v : p.k;
  d.data_type = bf16 ? kTmaDataBf16 : kTmaDataFp16;
  d.rank = 4;
  d.dims[0] = static_cast<uint64_t>(head_dim);
  d.dims[1] = static_cast<uint64_t>(p.kv_len);
  d.dims[2] = static_cast<uint64_t>(p.kv_heads);
  d.dims[3] = static_cast<uint64_t>(p.batch);
  d.strides[0] = static_cast<uint64_t>(is_v ? p.v_row_stride : p.k_row_stride) * 2;
  d.strides[1] = static_cast<uint64_t>(is_v ? p.v_head_stride : p.k_head_stride) * 2;
  d.strides[2] = static_cast<uint64_t>(is_v ? p.v_batch_stride : p.k_batch_stride) * 2;
  d.box[0] = static_cast<unsigned>(wgmma_swizzle_bytes(head_dim) / 2);
  d.box[1] = static_cast<unsigned>(block_n);
  d.box[2] = 1;
  d.box[3] = 1;
  d.swizzle = wgmma_tma_swizzle(head_dim);
  return d;
}

}  // namespace device
}  // namespace cpgen
