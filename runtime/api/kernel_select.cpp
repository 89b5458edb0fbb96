#include "runtime/api/kernel_select.h"

#include <filesystem>
#include <memory>

#include "cache/database.h"
#include "cpgen/error.h"

namespace cpgen {

const StepSelection& RingKernelSelection::for_step(StepType step) const {
  for (const StepSelection& s : steps)
    if (s.workload.step == step) return s;
  throw Error(ErrorKind::kInternal, "no kernel was selected for step type " + std::string(step_type_name(step)));
}

std::string RingKernelSelection::database_text() const {
  if (database_used) return database_path;
  return (database_path.empty() ? std::string("none") : database_path) + " (" + database_note + ")";
}

RingKernelSelection select_ring_kernels(const Problem& problem, const std::string& database_path,
                                        const std::string& arch, int device, const PretunedCaches& caches) {
  problem.validate();
  RingKernelSelection out;
  out.device = device_class_for(arch, device);
  out.environment = current_environment(device);
  std::unique_ptr<Database> db;
  try {
    out.database_path = resolve_db_path(database_path);
  } catch (const Error& e) {
    out.database_note = std::string("no path: ") + e.what();
  }
  if (!out.database_path.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(out.database_path, ec)) {
      out.database_note = "absent";
    } else {
      try {
        db = std::make_unique<Database>(out.database_path, Database::ReadOnly{});
        out.database_used = true;
      } catch (const Error& e) {
        out.database_note = std::string("unreadable: ") + e.what();
        warn("the tuning database " + out.database_path + " was not used for kernel selection: " + e.what());
      }
    }
  }
  out.steps = select_for_problem(problem, out.device, db.get(), out.environment, caches);
  if (!out.database_used) {
    for (StepSelection& s : out.steps) s.selection.reason += "; tuning database " + out.database_text();
  }
  return out;
}

}  // namespace cpgen
