#include "runtime/kernel_select.h"

#include "cpgen/error.h"

namespace cpgen::gpu {

KernelChoice choose_kernel(const Problem& problem, const std::string& arch,
                           const std::string& database_path) {
  const int group = static_cast<int>(problem.gqa_group());
  const int hd = static_cast<int>(problem.head_dim);
  KernelChoice choice;
  choice.spec = KernelSpec::default_for(problem.dtype, hd, problem.causal, group);
  Feasibility f = check_feasibility(choice.spec, arch);
  const std::string db_note =
      database_path.empty() ? "" : " (database " + database_path + " is not consulted by this build)";
  if (f.feasible) {
    choice.source = "default";
    choice.reason = "KernelSpec::default_for on " + arch + db_note;
    return choice;
  }
  for (const KernelSpec& candidate : KernelSpec::candidates_for(problem.dtype, hd, problem.causal, group)) {
    if (check_feasibility(candidate, arch).feasible) {
      choice.spec = candidate;
      choice.source = "default-fallback";
      choice.reason = "the default " + KernelSpec::default_for(problem.dtype, hd, problem.causal, group).uri() +
                      " does not fit " + arch + " (" + f.reason + "); first feasible candidate" + db_note;
      return choice;
    }
  }
  throw Error(ErrorKind::kInfeasible, "no forward step kernel config fits " + arch + " for dtype " +
                                          std::string(dtype_name(problem.dtype)) + " head_dim " +
                                          std::to_string(hd) + " gqa " + std::to_string(group) +
                                          ": " + f.reason);
}

}  // namespace cpgen::gpu
