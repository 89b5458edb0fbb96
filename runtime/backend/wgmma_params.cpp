#include "runtime/backend/wgmma_params.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "cpgen/error.h"
#include "emulation/tensor_map.h"
#include "templates/layout.cuh"

namespace cpgen {
namespace {

std::string check_tensor(const char* name, const void* base, int64_t batch_stride, int64_t head_stride,
                         int64_t row_stride) {
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0)
    return std::string(name) + " is not 16-byte aligned (TMA reads from 16-byte aligned bases)";
  for (const auto& [what, stride] :
       {std::pair<const char*, int64_t>{"batch", batch_stride}, {"head", head_stride}, {"row", row_stride}})
    if (stride < 0 || stride % 8 != 0)
      return std::string(name) + " " + what + " stride " + std::to_string(stride) +
             " elements: TMA needs a non-negative multiple of 8 elements (16 bytes)";
  return "";
}

}  // namespace

void nest_unused_strides(TmaMapDescription& d, bool never_read) {
  // A dim of extent 1 is never stepped along, and a map the kernel never reads (an empty chunk's
  // K/V, whose layout has zero head and batch strides) is stepped along nowhere, so those strides
  // are free. A zero one (also a caller's size-1 dim with stride 0, which check_tensor_strides
  // accepts) becomes the bytes the inner dims span (the largest stride times extent among them),
  // as for a dense tensor and as the driver's documentation pictures strides, a multiple of 16
  // bytes as each stride is. Whether cuTensorMapEncodeTiled would take a 0 there is not
  // documented either way.
  uint64_t span = (d.dims[0] * 2 + 15) / 16 * 16;  // 16-bit elements: the row in whole 16 bytes
  for (unsigned i = 1; i < d.rank; ++i) {
    uint64_t& stride = d.strides[i - 1];
    if (stride == 0 && (never_read || d.dims[i] == 1)) stride = span;
    span = std::max(span, stride * d.dims[i]);
  }
}

std::string encode_emulated_tma_map(const TmaMapDescription& d, device::TmaMap* map) {
  static_assert(sizeof(device::TmaMap) == sizeof(emulation::TensorMap), "both maps are the CUtensorMap's 128 bytes");
  const uint32_t element_strides[5] = {1, 1, 1, 1, 1};
  return emulation::encode_tensor_map_tiled(
      reinterpret_cast<emulation::TensorMap*>(map), d.data_type, d.rank, d.global, d.dims, d.strides, d.box,
      element_strides, emulation::kTensorMapInterleaveNone, d.swizzle, 0, emulation::kTensorMapOobFillZero);
}

std::string wgmma_tma_requirements(const RingFwdParams& p) {
  for (const std::string& error : {check_tensor("q", p.q, p.q_batch_stride, p.q_head_stride, p.q_row_stride),
                                   check_tensor("k", p.k, p.k_batch_stride, p.k_head_stride, p.k_row_stride),
                                   check_tensor("v", p.v, p.v_batch_stride, p.v_head_stride, p.v_row_stride)})
    if (!error.empty()) return error;
  return "";
}

RingFwdWgmmaParams wgmma_params(const KernelSpec& spec, const RingFwdParams& params, TmaMapEncoder encode,
                                long long l2_bytes) {
  if (spec.kind != KernelKind::kForwardWgmma)
    throw Error(ErrorKind::kInternal, "wgmma_params: " + spec.uri() + " is not a wgmma kernel");
  if (const std::string error = wgmma_tma_requirements(params); !error.empty())
    throw Error(ErrorKind::kBadInput, spec.uri() + ": " + error);
  RingFwdWgmmaParams w{};
  w.base = params;
  const int element_bytes = 2;  // the family's dtypes, bf16 and fp16
  w.section_pairs = device::persistent_section_pairs(params.kv_len, spec.head_dim, element_bytes, l2_bytes);
  const bool bf16 = spec.dtype == Dtype::kBf16;
  TmaMapDescription q = device::q_map_description(params, bf16, spec.head_dim, spec.gqa_group, spec.block_m);
  TmaMapDescription k = device::kv_map_description(params, false, bf16, spec.head_dim, spec.block_n);
  TmaMapDescription v = device::kv_map_description(params, true, bf16, spec.head_dim, spec.block_n);
  // A launch over no keys (a last step on an empty chunk) loads no K/V tile, but a map still needs
  // extents of at least one; the kernel never reads through it.
  const bool no_keys = k.dims[1] == 0;
  for (TmaMapDescription* kv : {&k, &v})
    if (kv->dims[1] == 0) kv->dims[1] = 1;
  nest_unused_strides(q, false);
  nest_unused_strides(k, no_keys);
  nest_unused_strides(v, no_keys);
  struct Named {
    const char* name;
    const TmaMapDescription* description;
    device::TmaMap* map;
  };
  for (const Named& m : {Named{"q", &q, &w.q_map}, Named{"k", &k, &w.k_map}, Named{"v", &v, &w.v_map}}) {
    const std::string error = encode(*m.description, m.map);
    if (!error.empty())
      throw Error(ErrorKind::kCuda, spec.uri() + ": the tensor map of " + m.name + " was refused: " + error);
  }
  return w;
}

}  // namespace cpgen
