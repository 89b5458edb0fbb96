// Reads the resource report that ptxas writes into the NVRTC log under --ptxas-options=--verbose:
//
//   ptxas info    : Compiling entry function 'k' for 'sm_90'
//   ptxas info    : Function properties for k
//   ptxas         .     256 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
//   ptxas info    : Used 18 registers, used 1 barriers, 256 bytes cumulative stack size, 1024 bytes smem
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace cpgen {

struct FunctionResources {
  bool is_entry = false;  // a __global__ kernel (has a "Used N registers" line)
  int registers = 0;
  int stack_frame_bytes = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int shared_bytes = 0;   // static shared memory
  int const_bytes = 0;    // cmem[0], the parameter and constant bank
};

// Every function the log reports, by (mangled or extern "C") name.
std::map<std::string, FunctionResources> parse_ptxas_log(std::string_view log);

struct KernelResources {
  int registers = 0;
  int spill_bytes = 0;  // stores + loads, of the kernel and of every non-inlined device function
  int stack_bytes = 0;
  int shared_bytes = 0;
};

// The resources of entry function `kernel`; nullopt when the log does not report it (e.g. ptxas
// verbose output was not requested). Device functions that were not inlined are reached only from
// the program's kernels, and cpgen compiles one kernel per program, so their spills count too.
std::optional<KernelResources> kernel_resources(std::string_view log, std::string_view kernel);

}  // namespace cpgen
