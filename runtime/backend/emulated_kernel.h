// One emulated kernel loaded into the process: the shared object compile_emulated built
// (runtime/jit/host_jit.h) written to a private temporary file, dlopen()ed, and its C entry point
// (emulation/emulated_launch.h) called for each launch. The object carries its own emulator, whose
// state is per host thread, so launches from several threads may run at once.
#pragma once

#include <string>
#include <vector>

#include "emulation/emulated_launch.h"
#include "runtime/jit/compiled_kernel.h"

namespace cpgen {

// The value of its error bound that every .approx instruction of this process's emulated
// launches returns from now on (emulation/cuda_emulation.h, "The .approx instructions"):
// correctly rounded by default; the edges check a kernel against what the PTX ISA allows a GPU.
enum class EmulatedApproximation {
  kCorrectlyRounded = CPGEN_APPROX_CORRECTLY_ROUNDED,
  kHigh = CPGEN_APPROX_HIGH,
  kLow = CPGEN_APPROX_LOW,
  kMixed = CPGEN_APPROX_MIXED,
};
void set_emulated_approximation(EmulatedApproximation mode);
constexpr EmulatedApproximation kEmulatedApproximations[] = {
    EmulatedApproximation::kCorrectlyRounded, EmulatedApproximation::kHigh, EmulatedApproximation::kLow,
    EmulatedApproximation::kMixed};
// "exact", "high", "low", "mixed".
const char* approximation_name(EmulatedApproximation mode);

struct EmulatedGrid {
  unsigned x = 1, y = 1, z = 1;
};

class EmulatedKernel {
 public:
  // Throws Error(kCompile) when the object cannot be loaded or has no entry point.
  explicit EmulatedKernel(const CompiledKernel& compiled);
  ~EmulatedKernel();
  EmulatedKernel(const EmulatedKernel&) = delete;
  EmulatedKernel& operator=(const EmulatedKernel&) = delete;

  // Runs the whole grid before returning, its global accesses checked against `buffers` (none:
  // unchecked), under an EmulatedFaultTrap (a plain access to a guard page fails it). Throws
  // Error(kInternal) naming the URI with the emulator's report: a deadlock
  // (threads waiting at different barriers) or the sanitizer's findings.
  void launch(EmulatedGrid grid, int threads, int shared_bytes, const void* params,
              const std::vector<CpgenEmulatedBuffer>& buffers = {}) const;
  const std::string& uri() const { return uri_; }

 private:
  std::string uri_;
  void* handle_ = nullptr;
  CpgenEmulatedEntry entry_ = nullptr;
  CpgenEmulatedFault recover_ = nullptr;
};

}  // namespace cpgen
