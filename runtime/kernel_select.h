// Which forward step kernel a ring runs. Until the tuning database lookup is wired into the
// runtime, the documented default (KernelSpec::default_for) is used, falling back to the first
// feasible candidate where the default does not fit the arch; the choice says so.
#pragma once

#include <string>

#include "cpgen/problem.h"
#include "generator/kernel_spec.h"

namespace cpgen::gpu {

struct KernelChoice {
  KernelSpec spec;
  std::string source;  // "default", "default-fallback"
  std::string reason;  // one line
};

KernelChoice choose_kernel(const Problem& problem, const std::string& arch,
                           const std::string& database_path);

}  // namespace cpgen::gpu
