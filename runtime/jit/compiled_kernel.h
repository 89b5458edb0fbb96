// What one run-time compilation produces: the cubin of one kernel for one arch, and what ptxas
// reported about its resources. Shared by the JIT (runtime/jit/jit.h) and the compiled-kernel store
// (runtime/jit/kernel_store.h).
#pragma once

#include <string>

namespace cpgen {

struct CompileStats {
  int registers = 0;     // per thread
  int spill_bytes = 0;   // spill stores + spill loads, bytes per thread
  int stack_bytes = 0;   // stack frame, bytes per thread
  int shared_bytes = 0;  // static shared memory (dynamic shared memory is a launch parameter)
  int cubin_bytes = 0;
  double compile_ms = 0;    // wall time this request took: NVRTC, or reading the store
  bool from_store = false;  // true when served from the compiled-kernel store without NVRTC
};

struct CompiledKernel {
  std::string uri;    // the kernel's extern "C" name, also the NVRTC program name
  std::string arch;   // "sm_80", "sm_90", "sm_90a"
  std::string key;    // store key: hash of (source, templates, options, NVRTC version, arch)
  std::string cubin;  // bytes
  CompileStats stats;
  std::string log;    // NVRTC and ptxas log of the compile that produced the cubin
  // Why the store could not keep this fresh compile ("" when it did, or without a store): the
  // kernel is good, and a command that fills a store reports it.
  std::string not_stored;
  // The PTX that NVRTC handed to ptxas; only from an NVRTC compile (the store keeps none), for
  // reading what ptxas then scheduled (`cpgen compile --emit-ptx`).
  std::string ptx;
};

}  // namespace cpgen
