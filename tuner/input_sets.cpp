#include "tuner/input_sets.h"

#include <algorithm>

#include "cpgen/error.h"
#include "runtime/cuda/cuda_driver.h"

namespace cpgen {

size_t input_set_count(size_t l2_bytes, size_t free_bytes, size_t set_bytes, const std::string& what) {
  set_bytes = std::max<size_t>(set_bytes, 1);
  if (set_bytes > free_bytes / 2) {
    throw Error(ErrorKind::kCuda, "tune: one " + what + " needs " + std::to_string(set_bytes >> 20) + " MiB; the device has " +
                                      std::to_string(free_bytes >> 20) + " MiB free");
  }
  const size_t count = std::clamp<size_t>((4 * l2_bytes + set_bytes - 1) / set_bytes, 2, kMaxInputSets);
  return std::min(count, free_bytes / 2 / set_bytes);
}

size_t device_input_set_count(int device, size_t set_bytes, const std::string& what) {
  const cu::DriverApi& api = cu::driver();
  CUdevice dev = 0;
  CPGEN_CU_CHECK(api.cuDeviceGet(&dev, device));
  int l2_bytes = 0;
  CPGEN_CU_CHECK(api.cuDeviceGetAttribute(&l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev));
  size_t free_bytes = 0, total_bytes = 0;
  CPGEN_CU_CHECK(api.cuMemGetInfo(&free_bytes, &total_bytes));
  return input_set_count(static_cast<size_t>(std::max(l2_bytes, 0)), free_bytes, set_bytes, what);
}

}  // namespace cpgen
