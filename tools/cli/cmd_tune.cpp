// cpgen tune: tune every workload of a shapes file into the tuning database, the forward ring's
// step types and the backward ring's (`--only fwd|bwd` picks one). Without a GPU it
// compiles and prunes every candidate, records them as not-timed, says that timing needs a GPU and
// exits 0 (3 with --require-gpu).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>

#include "cache/environment.h"
#include "cache/sqlite_kernel_store.h"
#include "cpgen/error.h"
#include "generator/kernel_spec.h"
#include "runtime/jit/jit.h"
#include "runtime/jit/kernel_store.h"
#include "runtime/ring/shapes.h"
#include "tools/cli/cli_db.h"
#include "tools/cli/command.h"
#include "tools/cli/int_range.h"
#include "tools/cli/store_dir.h"
#include "runtime/cuda/cuda_driver.h"
#include "tuner/nccl_rank_group.h"
#include "tuner/tuner.h"

namespace cpgen::cli {
namespace {

using nlohmann::json;

struct TuneCliOptions {
  std::string shapes;
  std::string db;
  std::string arch;
  double budget_s = 0;
  bool json_output = false;
  bool require_gpu = false;
  int max_candidates = 0;
  int jobs = 0;
  int runs = 20;
  int warmup = 5;
  double race_margin = 1.25;
  double check_race_margin = 1.5;
  std::string store_dir;
  bool no_store = false;
  bool kernels_in_db = false;
  bool quiet = false;
  int rank = 0;
  int world_size = 1;
  std::string nccl_id_file;
  std::string only;  // "", "fwd" or "bwd"
};

constexpr int kExitNoGpu = 3;

// Seconds to the hundredth ("2.00002e-07" and "0.386598" were printed as they came).
std::string seconds_hundredths(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", s);
  return text;
}

std::string ms_text(double ms) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.4f ms", ms);
  return buf;
}

// --only's value into the directions a tune covers; empty: both.
void choose_directions(const std::string& only, TuneOptions* options) {
  if (only.empty()) return;
  if (only != "fwd" && only != "bwd") throw_bad_input("tune: --only '" + only + "' is not allowed; allowed: fwd, bwd");
  options->forward = only == "fwd";
  options->backward = only == "bwd";
}

void run(const TuneCliOptions& o) {
  TuneOptions options;
  choose_directions(o.only, &options);
  options.max_candidates = o.max_candidates;
  options.budget_s = o.budget_s;
  options.runs = o.runs;
  options.warmup = o.warmup;
  options.race_margin = o.race_margin;
  options.race_check_margin = o.check_race_margin;
  // Checked first: a bad value is refused before the shapes file is read or a GPU is looked for.
  check_tune_options(options);
  std::vector<Problem> problems = load_shapes_file(o.shapes);
  if (!o.arch.empty()) validate_arch(o.arch);
  if (o.rank >= o.world_size) {
    throw_bad_input("tune: --rank " + std::to_string(o.rank) + " must lie in [0, --world-size " + std::to_string(o.world_size) + ")");
  }
  if (!o.store_dir.empty() + o.kernels_in_db + o.no_store > 1)
    throw_bad_input("tune: give one of --store DIR, --kernels-in-db or --no-store, not several");
  const bool multi_rank = o.world_size > 1;
  if (multi_rank && o.nccl_id_file.empty()) throw_bad_input("tune: --world-size > 1 needs --nccl-id-file (a path all ranks can read)");
  if (!multi_rank && !o.nccl_id_file.empty())
    throw_bad_input("tune: --nccl-id-file goes with --world-size > 1 (a tune of one process has no ranks to join)");
#ifndef CPGEN_HAVE_NCCL
  if (multi_rank) throw_bad_input("tune: this build has no NCCL; --world-size must be 1");
#endif
  // One GPU per rank on a node: rank r uses device r modulo the device count.
  const int gpus = cu::device_count();
  const int device = gpus > 0 ? o.rank % gpus : 0;
  std::unique_ptr<CandidateTimer> timer = make_gpu_timer_if_present(device);
  if (!timer && o.require_gpu) {
    std::cerr << "cpgen: tune: timing needs a GPU and none is present (--require-gpu); nothing was tuned\n";
    set_exit_code(kExitNoGpu);
    return;
  }
  // The same device class as explain and the runtime key their lookups by.
  const DeviceClass device_class = device_class_for(o.arch, device);
  std::unique_ptr<RankGroup> ranks;
#ifdef CPGEN_HAVE_NCCL
  if (multi_rank) {
    if (!timer) throw Error(ErrorKind::kNoDevice, "tune: a multi-rank tune runs NCCL between GPUs and needs one per rank");
    ranks = NcclRankGroup::create(o.rank, o.world_size, device, o.nccl_id_file);
  }
#endif

  if (!o.store_dir.empty()) check_store_dir(o.store_dir, "tune");
  // The database is opened (refused, or repaired) before the kernel store shares its file.
  auto db = open_db(o.db);
  std::unique_ptr<KernelStore> own_store;
  KernelStore* store = nullptr;
  if (!o.no_store) {
    if (!o.store_dir.empty()) own_store = std::make_unique<DirectoryKernelStore>(o.store_dir);
    if (o.kernels_in_db) own_store = std::make_unique<SqliteKernelStore>(db->path());
    store = own_store ? own_store.get() : default_kernel_store();
  }
  options.arch = device_class.arch;
  options.jobs = o.jobs;
  // Progress goes to stderr in both modes, so --json keeps stdout clean and still shows life.
  options.quiet = o.quiet;
  CompileFn compile = [store](const KernelSpec& spec, std::string_view arch) { return compile_kernel(spec, arch, store); };
  // Records name the environment of the device this rank times on (device 0's was recorded for
  // every rank, so a rank on another GPU model filed its timings under the wrong one).
  Tuner tuner(*db, options, compile, timer.get(), ranks.get(), current_environment(device));
  TuneReport report = tuner.tune(problems, device_class);

  if (o.json_output) {
    json workloads = json::array();
    for (const WorkloadResult& r : report.workloads) {
      workloads.push_back({{"direction", direction_name(r.workload)}, {"workload", r.workload.to_json()},
                           {"pruned", r.pruned}, {"compiled", r.compiled}, {"compile_failed", r.compile_failed}, {"timed", r.timed}, {"stopped_early", r.stopped_early}, {"rejected", r.rejected},
                           {"not_timed", r.not_timed}, {"winner", r.winner ? json(r.winner->kernel_uri) : json(nullptr)},
                           {"winner_median_ms", r.winner ? json(*r.winner->median_ms) : json(nullptr)}, {"note", r.note},
                           {"compile_s", r.compile_s}, {"setup_s", r.setup_s}, {"timing_s", r.timing_s},
                           {"measure_s", r.measure_s}, {"store_s", r.store_s}});
    }
    std::cout << json{{"db", db->path()}, {"device", device_class.gpu_name}, {"arch", device_class.arch}, {"timed", report.timed},
                      {"seconds", report.seconds}, {"notice", report.notice}, {"workloads", workloads}}.dump(2) << "\n";
    return;
  }
  std::cout << "tuned " << report.workloads.size() << " workload(s) of " << problems.size() << " shape(s) for "
            << device_class.gpu_name << " (" << device_class.arch << ") into " << db->path() << " in " << seconds_hundredths(report.seconds)
            << " s\n";
  for (const WorkloadResult& r : report.workloads) {
    std::cout << "  " << direction_name(r.workload) << ": " << r.workload.describe() << "\n    " << r.pruned
              << " pruned by the model, " << r.compiled << " compiled, " << r.compile_failed << " failed to compile or spilled, " << r.timed << " timed ("
              << r.stopped_early << " stopped early by the race), " << r.rejected
              << " rejected (wrong result or launch failure), " << r.not_timed << " not timed\n";
    std::cout << "    seconds: " << seconds_hundredths(r.compile_s) << " compiling, " << seconds_hundredths(r.setup_s)
              << " preparing inputs and checking the reference, " << seconds_hundredths(r.timing_s)
              << " checking and timing the candidates (" << seconds_hundredths(r.measure_s) << " in the timer, "
              << seconds_hundredths(r.store_s) << " storing records)\n";
    if (r.winner) std::cout << "    winner: " << r.winner->kernel_uri << " (" << ms_text(*r.winner->median_ms) << " median)\n";
    // Also where there is no winner: why (the reference failed its check, the inputs did not fit).
    if (!r.note.empty()) std::cout << "    note: " << r.note << "\n";
  }
  if (!report.notice.empty()) std::cout << "note: " << report.notice << "\n";
}

const CommandRegistrar kTune("tune", [](CLI::App& root) {
  auto o = std::make_shared<TuneCliOptions>();
  auto* cmd = root.add_subcommand("tune", "Compile, verify and time kernel candidates for the shapes of a file; keep the winners");
  cmd->add_option("--shapes", o->shapes, "shapes file (JSON, see examples/shapes)")->required();
  cmd->add_option("--only", o->only, "tune only one direction: fwd (the forward step types) or bwd (the backward ones); default both");
  add_db_option(cmd, &o->db);
  cmd->add_option("--arch", o->arch, "target arch: " + supported_archs_text() + " (default: the GPU's, else sm_90a)");
  cmd->add_option("--budget-s", o->budget_s, "stop timing new candidates after this many seconds (0: no limit)")
      ->check(number_at_least(0, " (0: no limit)"));
  cmd->add_flag("--json", o->json_output, "print JSON");
  cmd->add_flag("--require-gpu", o->require_gpu, "exit 3 when no GPU is present instead of compiling only");
  cmd->add_option("--max-candidates", o->max_candidates, "at most this many viable candidates per workload (0: all)")
      ->check(int_range(0, 1000000, " (0: all)"));
  cmd->add_option("-j,--jobs", o->jobs, "parallel compiles (default: CPU count)")->check(int_range(0, 1024, " (0: one per CPU)"));
  // Checked here, before the database is opened (the Tuner checks them again for its other callers).
  cmd->add_option("--runs", o->runs, "timed launches per candidate, at least 20 (the median is kept)")
      ->check(int_range(20, 1000000));
  cmd->add_option("--warmup", o->warmup, "untimed launches before timing, at most (a candidate whose checked launch took long gets about 25 ms of them, at least two)")->check(int_range(1, 1000000));
  cmd->add_option("--race-margin", o->race_margin,
                  "time a candidate no further when its first 5 runs' median is above this many times the best "
                  "so far (default 1.25; 0: time every candidate fully)")
      ->check(number_at_least(0));
  cmd->add_option("--check-race-margin", o->check_race_margin,
                  "time a candidate no further, not even warmed up, when the launch that checked its output took "
                  "more than this many times the best so far, or times 1 ms where the best is faster (default 1.5; "
                  "0: never)")
      ->check(number_at_least(0));
  cmd->add_option("--store", o->store_dir, "compiled-kernel store directory (default: $CPGEN_KERNEL_DIR, $XDG_CACHE_HOME/cpgen/kernels, ~/.cache/cpgen/kernels or $TMPDIR/cpgen-<uid>/kernels)");
  cmd->add_flag("--no-store", o->no_store, "always run NVRTC and store no compiled kernels");
  cmd->add_flag("--kernels-in-db", o->kernels_in_db, "keep compiled kernels in the database's kernels table instead of a directory");
  cmd->add_flag("-q,--quiet", o->quiet, "no progress lines");
  cmd->add_option("--rank", o->rank, "this process's rank in a multi-rank tune (rank 0 times and decides)")
      ->check(int_range(0, kMaxCpSize - 1));
  cmd->add_option("--world-size", o->world_size, "ranks in a multi-rank tune over NCCL (default 1)")
      ->check(int_range(1, kMaxCpSize));
  cmd->add_option("--nccl-id-file", o->nccl_id_file, "file through which rank 0 hands its NCCL id to the other ranks");
  cmd->callback([o] { run(*o); });
});

}  // namespace
}  // namespace cpgen::cli
