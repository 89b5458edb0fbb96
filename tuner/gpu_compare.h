// The tuner's candidate check on the GPU (templates/compare.cuh): a candidate's out and lse, or
// its dq, dk and dv, against the reference config's, every element, without copying any of them
// to the host.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "cpgen/types.h"
#include "runtime/cuda/device_buffer.h"

namespace cpgen {

class LoadedKernel;

// The comparison kernels: the forward's out and lse, and one fp32 gradient.
inline constexpr const char* kCompareKernel = "cpgen_compare_outputs";
inline constexpr const char* kCompareGradientsKernel = "cpgen_compare_gradients";
// The NVRTC source of one of them (`kernel`: either name above).
std::string compare_source(std::string_view kernel);

// The first element of each tensor where got and want disagree; -1 where every element agrees.
struct Disagreement {
  int64_t out = -1;
  int64_t lse = -1;
};

class GpuCompare {
 public:
  // Each kernel is compiled (through the kernel store) and loaded on `device` at its first run.
  explicit GpuCompare(int device);
  // out: `n` 16-bit elements of `dtype`, within `tolerance`; lse: `n_lse` floats, within
  // lse_absolute + lse_relative |want|. Runs on `stream` and waits for it.
  Disagreement run(const DeviceBuffer& got, const DeviceBuffer& want, int64_t n, double tolerance, Dtype dtype,
                   const DeviceBuffer& got_lse, const DeviceBuffer& want_lse, int64_t n_lse, double lse_absolute,
                   double lse_relative, CUstream stream);
  // A gradient of `rows` rows of `head_dim` fp32 elements: each within relative (|want| + the
  // rms of want's row), want taken `want_scale` times (2: got is two launches' sum). The first
  // disagreeing flat index, or -1.
  int64_t run_gradient(const DeviceBuffer& got, const DeviceBuffer& want, int64_t rows, int head_dim, double relative,
                       CUstream stream, float want_scale = 1.0f);

 private:
  const LoadedKernel& kernel(std::string_view name, const LoadedKernel*& loaded);

  int device_;
  const LoadedKernel* outputs_ = nullptr;
  const LoadedKernel* gradients_ = nullptr;
  DeviceBuffer first_;  // the kernels' minima
};

}  // namespace cpgen
