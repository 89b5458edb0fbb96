// TMA tensor maps made by the CUDA driver (cuTensorMapEncodeTiled) from the template's map
// descriptions (templates/params_wgmma.cuh): the GPU side of the wgmma family's launch params
// (runtime/backend/wgmma_params.h builds them; the emulated device uses the emulator's encoder
// with the same arguments).
#pragma once

#include <string>

#include "templates/params_wgmma.cuh"

namespace cpgen::cu {

// Encodes `description` into *map (the CUtensorMap's 128 bytes) with element strides 1, no
// interleave, zero out-of-bounds fill, no L2 promotion. Returns "" or one line: the driver's
// status and message, or that the driver has no cuTensorMapEncodeTiled (older than CUDA 12.0) or
// no GPU exists.
std::string encode_driver_tma_map(const TmaMapDescription& description, device::TmaMap* map);

}  // namespace cpgen::cu
