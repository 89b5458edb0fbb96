#include "runtime/cuda/tensor_map.h"

#include <cuda.h>

#include "runtime/cuda/cuda_driver.h"

namespace cpgen::cu {

static_assert(sizeof(device::TmaMap) == sizeof(CUtensorMap) && alignof(device::TmaMap) >= 64,
              "the kernel parameter's TmaMap holds a CUtensorMap (128 bytes, 64-byte aligned)");

std::string encode_driver_tma_map(const TmaMapDescription& d, device::TmaMap* map) {
  std::string why;
  const DriverApi* api = try_driver(&why);
  if (!api) return why;
  if (!api->cuTensorMapEncodeTiled)
    return "the CUDA driver has no cuTensorMapEncodeTiled (it is older than CUDA 12.0), which TMA kernels need";
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUresult status = api->cuTensorMapEncodeTiled(
      reinterpret_cast<CUtensorMap*>(map), static_cast<CUtensorMapDataType>(d.data_type), d.rank,
      const_cast<void*>(d.global), reinterpret_cast<const cuuint64_t*>(d.dims),
      reinterpret_cast<const cuuint64_t*>(d.strides), reinterpret_cast<const cuuint32_t*>(d.box), element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, static_cast<CUtensorMapSwizzle>(d.swizzle), CU_TENSOR_MAP_L2_PROMOTION_NONE,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status == CUDA_SUCCESS) return "";
  return "cuTensorMapEncodeTiled failed: " + describe(status);
}

}  // namespace cpgen::cu
