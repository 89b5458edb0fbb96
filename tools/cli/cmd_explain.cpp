// cpgen explain: which kernel config the runtime selects for a shape, and where it came from: the
// forward ring's step types, then the backward ring's (bwd-diagonal, ...), for an NCCL ring unless
// --ring loopback says the ranks share one GPU.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>

#include "cache/lookup.h"
#include "cache/pretuned.h"
#include "cache/workload.h"
#include "cpgen/error.h"
#include "generator/kernel_spec.h"
#include "generator/template_files.h"
#include "runtime/api/kernel_select.h"
#include "runtime/core/json_text.h"
#include "runtime/ring/shapes.h"
#include "tools/cli/cli_db.h"
#include "tools/cli/shape_options.h"
#include "tools/cli/command.h"
#include "tools/cli/slow_progress.h"

namespace cpgen::cli {
namespace {

using nlohmann::json;

struct ExplainOptions {
  std::string shape;
  std::string shapes_file;
  std::string db;
  std::string arch;
  std::string ring = "nccl";
  std::string gpu;
  int sm_count = 0;
  bool json_output = false;
};

void run(const ExplainOptions& o) {
  std::vector<Problem> problems = problems_of_options(o.shape, o.shapes_file, "explain");
  if (!o.arch.empty()) validate_arch(o.arch);
  // A GPU's name says neither its arch nor its SM count (an H100 PCIe has 114 SMs, an SXM 132),
  // and workloads are keyed by all three, so --gpu comes with the other two.
  // Names as drivers report them: printable ASCII, at most 255 characters (cuDeviceGetName's).
  if (o.gpu.size() > 255 || std::any_of(o.gpu.begin(), o.gpu.end(), [](char c) { return c < 0x20 || c > 0x7e; }))
    throw_bad_input("explain: --gpu " + in_quotes(o.gpu) +
                    " is not a GPU's name as a driver reports it (1 to 255 printable ASCII characters)");
  if (!o.gpu.empty() && (o.arch.empty() || o.sm_count <= 0))
    throw_bad_input("explain: --gpu " + in_quotes(o.gpu) + " needs --arch and --sm-count too (e.g. --gpu 'NVIDIA H200' --arch sm_90a --sm-count 132)");
  if (o.gpu.empty() && o.sm_count != 0)
    throw_bad_input("explain: --sm-count " + std::to_string(o.sm_count) + " is only read with --gpu NAME");
  if (o.ring != "nccl" && o.ring != "loopback")
    throw_bad_input("explain: --ring '" + o.ring + "' is not a ring; nccl (one GPU per rank) or loopback (every rank on one GPU)");
  // Opened once, read-only and checked: a file that is not SQLite exits 2, a damaged one 1.
  std::string db_path;
  std::string db_note;
  std::unique_ptr<Database> db;
  try {
    db_path = resolve_db_path(o.db);
  } catch (const Error& e) {
    db_note = std::string("no path: ") + e.what();
  }
  if (!db_path.empty()) {
    db = open_existing_db(o.db);
    if (!db) db_note = "absent";
  }
  // The selector RingAttention uses, so explain and the runtime agree.
  RingKernelSelector selector(db.get(), db_path, db_note, o.arch, 0);
  if (!o.gpu.empty()) selector.assume_device(o.gpu, o.sm_count);
  // Everything is selected before anything is printed, so that a failure leaves stdout empty.
  // select() also selects the backward step types, as RingAttention::backward loads them.
  std::vector<RingKernelSelection> selections;
  selections.reserve(problems.size());
  SlowProgress progress("explain", problems.size());
  for (const Problem& p : problems) {
    selections.push_back(selector.select(p));
    // What RingAttention does after selecting for a ring whose exchange runs kernels of its own.
    if (o.ring == "nccl") place_beside_exchange_kernels(selections.back(), ring_sm_margin(-1));
    progress.advance();
  }
  const RingKernelSelection& last = selections.back();
  // Which folders the pretuned caches came from: an installed cpgen finds them beside its own
  // library, so this is how a user sees which install (or $CPGEN_CACHES_DIR) was used.
  const PretunedCaches& caches = shipped_caches();
  json searched = json::array();
  for (const SearchedDir& d : caches.dirs) searched.push_back({{"path", d.path}, {"exists", d.exists}});
  if (o.json_output) {
    auto steps_json = [](const std::vector<StepSelection>& list) {
      json steps = json::array();
      for (const auto& [w, s] : list) {
        steps.push_back({{"step_type", step_type_name(w.step)}, {"direction", is_backward(w.step) ? "backward" : "forward"},
                         {"workload", w.to_json()}, {"kernel", s.spec.uri()},
                         {"source", config_source_name(s.source)}, {"origin", s.origin},
                         {"median_ms", s.median_ms ? json(*s.median_ms) : json(nullptr)},
                         {"ignored_other_environment", s.ignored_other_environment}, {"reason", s.reason}});
      }
      return steps;
    };
    json out = json::array();
    for (size_t i = 0; i < problems.size(); ++i) {
      out.push_back({{"shape", problems[i].name}, {"steps", steps_json(selections[i].steps)},
                     {"backward_steps", steps_json(selections[i].backward_steps)}});
    }
    // The path looked at is named even when no file is there, as in text mode.
    std::cout << json{{"db", last.database_path.empty() ? json(nullptr) : json(last.database_path)},
                      {"db_used", last.database_used},
                      {"db_note", last.database_used ? json(nullptr) : json(last.database_note)},
                      {"device", last.device.gpu_name}, {"sm_count", last.device.sm_count},
                      {"device_assumed", !o.gpu.empty()}, {"arch", last.device.arch}, {"ring", o.ring},
                      {"cache_dirs", searched}, {"cache_files", caches.files},
                      {"templates", template_files_dir().empty() ? "built in" : template_files_dir()},
                      {"shapes", std::move(out)}}.dump(2) << "\n";
    return;
  }
  std::cout << "device " << last.device.gpu_name << " (" << last.device.arch
            << (o.gpu.empty() ? "" : ", " + std::to_string(last.device.sm_count) + " SMs, assumed by --gpu") << "), " << o.ring
            << " ring, database "
            << last.database_text() << "\n";
  // Tuned records and timed cache entries count only for the kernel code they were timed on, so
  // under another folder of templates those of every kernel it changes are passed over: say why.
  if (!template_files_dir().empty())
    std::cout << "templates " << template_files_dir()
              << " (CPGEN_TEMPLATES_DIR): records and cache entries apply only to kernels these templates leave unchanged\n";
  std::cout << "pretuned caches searched:";
  if (caches.dirs.empty()) std::cout << " none";
  for (const SearchedDir& d : caches.dirs) std::cout << " " << d.path << (d.exists ? "" : " (absent)");
  std::cout << "\n";
  for (size_t i = 0; i < problems.size(); ++i) {
    std::cout << problems[i].name << ":\n";
    for (const std::vector<StepSelection>* list : {&selections[i].steps, &selections[i].backward_steps}) {
      for (const auto& [w, s] : *list) {
        std::cout << "  " << step_type_name(w.step) << ": " << s.spec.uri() << "\n"
                  << "    from " << config_source_name(s.source) << " (" << s.origin << "): " << s.reason << "\n";
      }
    }
  }
}

const CommandRegistrar kExplain("explain", [](CLI::App& root) {
  auto o = std::make_shared<ExplainOptions>();
  auto* cmd = root.add_subcommand("explain", "Say which kernel config is selected for a shape and where it came from");
  cmd->add_option("--shape", o->shape, "one shape as a JSON object, the fields of a shapes file entry");
  cmd->add_option("--shapes", o->shapes_file, "a shapes file");
  add_db_option(cmd, &o->db);
  cmd->add_option("--arch", o->arch, "target arch when no GPU is present, or of the --gpu: " + supported_archs_text() + " (default: the device's, else sm_90a)");
  cmd->add_option("--gpu", o->gpu,
                  "select as on this GPU (its name as the driver reports it, e.g. 'NVIDIA H200'), with --arch and --sm-count: "
                  "what a shipped cache gives a job there, from a machine without it; database records still count only where they were made");
  cmd->add_option("--sm-count", o->sm_count, "the --gpu's number of SMs (e.g. 132 for an H100 SXM or H200)");
  cmd->add_option("--ring", o->ring,
                  "the ring the kernels are for: nccl (default; one GPU per rank, where a persistent winner runs as its "
                  "plain launch beside NCCL's kernels unless $CPGEN_SM_MARGIN leaves SMs to them) or loopback (every rank on one GPU, as cpgen bench and verify run it)");
  cmd->add_flag("--json", o->json_output, "print JSON");
  cmd->callback([o] { run(*o); });
});

}  // namespace
}  // namespace cpgen::cli
