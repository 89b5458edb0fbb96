#include "runtime/api/kernel_select.h"

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "cache/database.h"
#include "cpgen/error.h"

namespace cpgen {

const StepSelection& RingKernelSelection::for_step(StepType step) const {
  for (const std::vector<StepSelection>* list : {&steps, &backward_steps})
    for (const StepSelection& s : *list)
      if (s.workload.step == step) return s;
  throw Error(ErrorKind::kInternal, "no kernel was selected for step type " + std::string(step_type_name(step)));
}

std::string RingKernelSelection::database_text() const {
  if (database_used) return database_path;
  return (database_path.empty() ? std::string("none") : database_path) + " (" + database_note + ")";
}

RingKernelSelector::RingKernelSelector(const std::string& database_path, const std::string& arch, int device,
                                       const PretunedCaches& caches)
    : caches_(caches) {
  base_.device = device_class_for(arch, device);
  base_.environment = current_environment(device);
  try {
    base_.database_path = resolve_db_path(database_path);
  } catch (const Error& e) {
    base_.database_note = std::string("no path: ") + e.what();
  }
  if (base_.database_path.empty()) return;
  std::error_code ec;
  if (!std::filesystem::exists(base_.database_path, ec)) {
    base_.database_note = "absent";
    return;
  }
  try {
    // Read-only: selecting never creates, repairs, migrates or locks a file.
    own_db_ = std::make_unique<Database>(base_.database_path, Database::ReadOnly{});
    db_ = own_db_.get();
    base_.database_used = true;
  } catch (const Error& e) {
    base_.database_note = std::string("unreadable: ") + e.what();
    warn("the tuning database " + base_.database_path + " was not used for kernel selection: " + e.what());
  }
}

RingKernelSelector::RingKernelSelector(Database* db, const std::string& database_path, const std::string& database_note,
                                       const std::string& arch, int device, const PretunedCaches& caches)
    : db_(db), caches_(caches) {
  base_.device = device_class_for(arch, device);
  base_.environment = current_environment(device);
  base_.database_path = database_path;
  base_.database_used = db != nullptr;
  base_.database_note = db ? std::string() : database_note;
}

RingKernelSelector::~RingKernelSelector() = default;

void RingKernelSelector::assume_device(const std::string& gpu_name, int sm_count) {
  base_.device.gpu_name = gpu_name;
  base_.device.sm_count = sm_count;
  base_.environment.gpu_name = gpu_name;
  base_.environment.sm_count = sm_count;
}

RingKernelSelection RingKernelSelector::select(const Problem& problem) const {
  problem.validate();
  return select_validated(problem);
}

RingKernelSelection RingKernelSelector::select_validated(const Problem& problem) const {
  RingKernelSelection out = base_;
  const auto select_steps = [&](Database* db) {
    out.steps = select_for_problem(problem, out.device, db, out.environment, caches_);
    out.backward_steps.clear();
    for (StepType step : backward_step_types_for(problem)) {
      const WorkloadKey w = workload_for(problem, step, out.device);
      out.backward_steps.push_back({w, select_config(w, db, out.environment, caches_)});
    }
  };
  if (db_) {
    try {
      // Every step type from one snapshot of the file, read again when a tune that began after
      // the open wrote to it meanwhile (Database::read_consistent).
      db_->read_consistent([&] { select_steps(db_); });
    } catch (const Error& e) {
      // A read that fails (a damaged row, a writer that kept changing the file) is what an open
      // that fails is: noted, warned about, and selection goes on without the database, here and
      // in this selector's later selections (a failed reopen leaves the Database closed; explain
      // selects for every shape of a file with one selector).
      if (e.kind() != ErrorKind::kDatabase) throw;
      db_ = nullptr;
      base_.database_used = false;
      base_.database_note = std::string("unreadable: ") + e.what();
      warn("the tuning database " + base_.database_path + " was not used for kernel selection: " + e.what());
      out.database_used = false;
      out.database_note = base_.database_note;
      select_steps(nullptr);
    }
  } else {
    select_steps(nullptr);
  }
  // Each workload carries the problem's mask: select_config looks up the masked workload first
  // and otherwise gives the unmasked shape's config specialized on the mask (cache/lookup.h).
  if (!out.database_used) {
    for (std::vector<StepSelection>* list : {&out.steps, &out.backward_steps})
      for (StepSelection& s : *list) s.selection.reason += "; tuning database " + out.database_text();
  }
  return out;
}

void use_plain_launches_beside_exchange_kernels(RingKernelSelection& selection) {
  for (StepSelection& s : selection.steps) {
    if (!s.selection.spec.persistent) continue;
    const std::string persistent = s.selection.spec.uri();
    s.selection.spec.persistent = false;
    s.selection.reason += "; runs as its plain launch " + s.selection.spec.uri() + " instead of " + persistent +
                          ": the ring's NCCL exchange runs kernels beside the step, which a persistent grid "
                          "would keep off its SMs";
  }
}

int ring_sm_margin(int option) {
  if (option < -1)
    throw_bad_input("RingOptions::sm_margin " + std::to_string(option) +
                    " is not allowed; allowed: -1 ($CPGEN_SM_MARGIN where set, else none) or a number of SMs >= 0");
  if (option >= 0) return option;
  const char* text = std::getenv("CPGEN_SM_MARGIN");
  if (!text || !*text) return -1;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || errno != 0 || value < 0 || value > 4096)
    throw_bad_input(std::string("CPGEN_SM_MARGIN '") + text + "' is not allowed; allowed: a whole number of SMs, 0 to 4096");
  return static_cast<int>(value);
}

void place_beside_exchange_kernels(RingKernelSelection& selection, int sm_margin) {
  if (sm_margin < 0) {
    use_plain_launches_beside_exchange_kernels(selection);
    return;
  }
  for (StepSelection& s : selection.steps) {
    if (s.selection.spec.persistent)
      s.selection.reason += "; leaves " + std::to_string(sm_margin) + " SM(s) to the ring's NCCL kernels (SM margin)";
  }
}

RingKernelSelection select_ring_kernels(const Problem& problem, const std::string& database_path,
                                        const std::string& arch, int device, const PretunedCaches& caches) {
  // The problem is checked before the database is opened, as before.
  problem.validate();
  return RingKernelSelector(database_path, arch, device, caches).select_validated(problem);
}

}  // namespace cpgen
