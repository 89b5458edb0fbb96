// The CUDA driver API, loaded at run time with dlopen so that cpgen links and runs on machines
// with no GPU driver (CI, the CPU test suite). Every call goes through CPGEN_CU_CHECK.
#pragma once

#include <cuda.h>

#include <string>

namespace cpgen::cu {

// Function pointers resolved from libcuda.so.1; the names follow cuda.h's versioned macros.
struct DriverApi {
#define CPGEN_CU_FN(name) decltype(&::name) name = nullptr;
#include "runtime/cuda/cuda_driver_fns.inc"
  // Optional: null when the driver lacks them (cuda_driver_optional_fns.inc).
#include "runtime/cuda/cuda_driver_optional_fns.inc"
#undef CPGEN_CU_FN
};

// Loads libcuda.so.1 and calls cuInit(0) once. Returns nullptr (and fills *why) where no driver
// or no device exists; never throws for that case.
const DriverApi* try_driver(std::string* why = nullptr);
// As try_driver, but throws Error(kNoDevice) naming the reason.
const DriverApi& driver();
// Number of CUDA devices, 0 where there is no driver or device.
int device_count();
// "CUDA_ERROR_OUT_OF_MEMORY: out of memory" for a driver status.
std::string describe(CUresult status);
// Throws Error(kCuda) with the call text, file:line and the driver's message.
[[noreturn]] void raise(CUresult status, const char* call, const char* file, int line);

}  // namespace cpgen::cu

#define CPGEN_CU_CHECK(call)                                                   \
  do {                                                                         \
    CUresult cpgen_status_ = (call);                                           \
    if (cpgen_status_ != CUDA_SUCCESS)                                         \
      ::cpgen::cu::raise(cpgen_status_, #call, __FILE__, __LINE__);            \
  } while (0)
