// Compiling a tuner's candidates in parallel. NVRTC is thread-safe, and each compile runs for
// hundreds of milliseconds, so a plain pool of threads pulling from one index is enough.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/records.h"
#include "generator/kernel_spec.h"
#include "runtime/jit/compiled_kernel.h"

namespace cpgen {

// Compiles one spec for an arch (normally compile_kernel through a kernel store); throws
// cpgen::Error as compile_kernel does. Tests substitute a fake.
using CompileFn = std::function<CompiledKernel(const KernelSpec&, std::string_view arch)>;

struct CompileOutcome {
  KernelSpec spec;
  std::optional<CompiledKernel> kernel;       // set when it compiled and passed the ptxas check
  Disposition disposition = Disposition::kNotTimed;  // kNotTimed when kernel is set
  std::string detail;                         // the failure's first line
};

// Compiles every spec with `jobs` threads (0: one per hardware thread), showing progress on
// stderr unless quiet. A kernel whose ptxas report shows spills is pruned as infeasible (spilled
// registers go to local memory on every tile iteration; such a config never wins).
std::vector<CompileOutcome> compile_candidates(const std::vector<KernelSpec>& specs, std::string_view arch,
                                               const CompileFn& compile, int jobs, bool quiet,
                                               const std::string& label);

}  // namespace cpgen
