// cpgen explain: which kernel config the runtime selects for a shape, and where it came from.
#include <nlohmann/json.hpp>

#include <iostream>

#include "cache/lookup.h"
#include "cache/pretuned.h"
#include "cache/workload.h"
#include "cpgen/error.h"
#include "generator/kernel_spec.h"
#include "runtime/api/kernel_select.h"
#include "runtime/ring/shapes.h"
#include "tools/cli/cli_db.h"
#include "tools/cli/command.h"

namespace cpgen::cli {
namespace {

using nlohmann::json;

struct ExplainOptions {
  std::string shape;
  std::string shapes_file;
  std::string db;
  std::string arch;
  bool json_output = false;
};

void run(const ExplainOptions& o) {
  if (o.shape.empty() == o.shapes_file.empty()) throw_bad_input("explain: give exactly one of --shape JSON or --shapes FILE");
  std::vector<Problem> problems = o.shapes_file.empty() ? parse_shapes_json("{\"shapes\": [" + o.shape + "]}", "--shape")
                                                        : load_shapes_file(o.shapes_file);
  if (!o.arch.empty()) validate_arch(o.arch);
  json out = json::array();
  RingKernelSelection last;
  for (const Problem& p : problems) {
    // The function RingAttention selects with, so explain and the runtime agree.
    last = select_ring_kernels(p, o.db, o.arch, 0);
    json steps = json::array();
    for (const auto& [w, s] : last.steps) {
      steps.push_back({{"step_type", step_type_name(w.step)}, {"workload", w.to_json()}, {"kernel", s.spec.uri()},
                       {"source", config_source_name(s.source)}, {"origin", s.origin},
                       {"median_ms", s.median_ms ? json(*s.median_ms) : json(nullptr)},
                       {"ignored_other_environment", s.ignored_other_environment}, {"reason", s.reason}});
    }
    out.push_back({{"shape", p.name}, {"steps", steps}});
  }
  // Which folders the pretuned caches came from: an installed cpgen finds them beside its own
  // library, so this is how a user sees which install (or $CPGEN_CACHES_DIR) was used.
  const PretunedCaches& caches = shipped_caches();
  json searched = json::array();
  for (const SearchedDir& d : caches.dirs) searched.push_back({{"path", d.path}, {"exists", d.exists}});
  if (o.json_output) {
    std::cout << json{{"db", last.database_used ? json(last.database_path) : json(nullptr)},
                      {"db_note", last.database_used ? json(nullptr) : json(last.database_note)},
                      {"device", last.device.gpu_name}, {"arch", last.device.arch},
                      {"cache_dirs", searched}, {"cache_files", caches.files}, {"shapes", out}}.dump(2) << "\n";
    return;
  }
  std::cout << "device " << last.device.gpu_name << " (" << last.device.arch << "), database " << last.database_text() << "\n";
  std::cout << "pretuned caches searched:";
  if (caches.dirs.empty()) std::cout << " none";
  for (const SearchedDir& d : caches.dirs) std::cout << " " << d.path << (d.exists ? "" : " (absent)");
  std::cout << "\n";
  for (const json& shape : out) {
    std::cout << shape["shape"].get<std::string>() << ":\n";
    for (const json& step : shape["steps"]) {
      std::cout << "  " << step["step_type"].get<std::string>() << ": " << step["kernel"].get<std::string>() << "\n"
                << "    from " << step["source"].get<std::string>() << " (" << step["origin"].get<std::string>() << "): "
                << step["reason"].get<std::string>() << "\n";
    }
  }
}

CommandRegistrar registrar("explain", [](CLI::App& root) {
  auto o = std::make_shared<ExplainOptions>();
  auto* cmd = root.add_subcommand("explain", "say which kernel config is selected for a shape and where it came from");
  cmd->add_option("--shape", o->shape, "one shape as a JSON object, the fields of a shapes file entry");
  cmd->add_option("--shapes", o->shapes_file, "a shapes file");
  add_db_option(cmd, &o->db);
  cmd->add_option("--arch", o->arch, "target arch when no GPU is present (sm_80, sm_90, sm_90a; default: the device's, else sm_90a)");
  cmd->add_flag("--json", o->json_output, "print JSON");
  cmd->callback([o] { run(*o); });
});

}  // namespace
}  // namespace cpgen::cli
