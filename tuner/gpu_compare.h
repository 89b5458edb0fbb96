// The tuner's candidate check on the GPU (templates/compare.cuh): a candidate's out and lse
// against the reference config's, every element, without copying either to the host.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "cpgen/types.h"
#include "runtime/cuda/device_buffer.h"

namespace cpgen {

class LoadedKernel;

// The NVRTC source of the comparison kernel (its name: kCompareKernel).
inline constexpr const char* kCompareKernel = "cpgen_compare_outputs";
std::string compare_source();

// The first element of each tensor where got and want disagree; -1 where every element agrees.
struct Disagreement {
  int64_t out = -1;
  int64_t lse = -1;
};

class GpuCompare {
 public:
  // Compiles (through the kernel store) and loads the comparison kernel on `device`.
  explicit GpuCompare(int device);
  // out: `n` 16-bit elements of `dtype`, within `tolerance`; lse: `n_lse` floats, within
  // lse_absolute + lse_relative |want|. Runs on `stream` and waits for it.
  Disagreement run(const DeviceBuffer& got, const DeviceBuffer& want, int64_t n, double tolerance, Dtype dtype,
                   const DeviceBuffer& got_lse, const DeviceBuffer& want_lse, int64_t n_lse, double lse_absolute,
                   double lse_relative, CUstream stream);

 private:
  int device_;
  const LoadedKernel* kernel_;
  DeviceBuffer first_;  // the kernel's two minima
};

}  // namespace cpgen
