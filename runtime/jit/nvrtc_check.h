// The one check shape for NVRTC calls: a failing call throws Error(kCompile) naming the call,
// file:line and NVRTC's own message. Compilation itself (nvrtcCompileProgram) is not wrapped:
// its failure is an expected outcome that jit.cpp reports with the log and the source.
#pragma once

#include <nvrtc.h>

namespace cpgen::nvrtc {

[[noreturn]] void raise(nvrtcResult status, const char* call, const char* file, int line);

}  // namespace cpgen::nvrtc

#define CPGEN_NVRTC_CHECK(call)                                                \
  do {                                                                         \
    nvrtcResult cpgen_nvrtc_status_ = (call);                                  \
    if (cpgen_nvrtc_status_ != NVRTC_SUCCESS)                                  \
      ::cpgen::nvrtc::raise(cpgen_nvrtc_status_, #call, __FILE__, __LINE__);   \
  } while (0)
