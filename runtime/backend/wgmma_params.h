// The params of one launch of the sm_90a wgmma family (templates/params_wgmma.cuh): the ring
// step's RingFwdParams plus the Q, K and V tensor maps, each encoded from the template's own
// description (q_map_description, kv_map_description). Both devices build them here, the GPU
// with the driver's cuTensorMapEncodeTiled (runtime/cuda/tensor_map.h), the emulated device with
// the emulator's encoder (emulation/tensor_map.h), so the two never disagree about a map's dims,
// strides or boxes, and TMA's requirements are checked once, before either encoder sees them.
#pragma once

#include <string>

#include "generator/kernel_spec.h"
#include "templates/params_wgmma.cuh"

namespace cpgen {

// Fills *map from `description`; returns "" or one line saying what the encoder refused.
using TmaMapEncoder = std::string (*)(const TmaMapDescription& description, device::TmaMap* map);

// The emulator's encoder with the arguments the driver would get (element strides 1, no
// interleave, zero fill, no L2 promotion).
std::string encode_emulated_tma_map(const TmaMapDescription& description, device::TmaMap* map);

// "" when q, k and v of `params` meet TMA's requirements (16-byte aligned bases; row, head and
// batch strides multiples of 8 elements, i.e. 16 bytes), else one line naming the tensor, the
// value and what is allowed.
std::string wgmma_tma_requirements(const RingFwdParams& params);

// Replaces the zero strides of `d` that no load can step along (dims of extent 1; every dim when
// `never_read`) by the bytes the inner dims span (wgmma_params does this for every map).
void nest_unused_strides(TmaMapDescription& d, bool never_read);

// The kernel's parameter for a launch of `spec` (kind kForwardWgmma) with `params` on a device
// whose L2 cache holds `l2_bytes` (the persistent launch's sections, layout.cuh
// persistent_section_pairs). Throws Error(kBadInput) naming the URI when a tensor breaks TMA's
// requirements, and Error(kCuda) naming the URI and the map when `encode` refuses one.
RingFwdWgmmaParams wgmma_params(const KernelSpec& spec, const RingFwdParams& params, TmaMapEncoder encode,
                                long long l2_bytes);

}  // namespace cpgen
