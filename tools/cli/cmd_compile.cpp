// cpgen compile: compile one kernel (--spec URI), every candidate of every supported combination
// (--all) or every default (--defaults: the kernels a runtime without a tuning database loads,
// so that a machine's store can be filled before a job) with NVRTC, through the compiled-kernel
// store, and report ptxas resources.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "cache/environment.h"
#include "cpgen/error.h"
#include "runtime/core/text_file.h"
#include "generator/kernel_spec.h"
#include "generator/kernel_spec_wgmma.h"
#include "generator/render.h"
#include "generator/template_files.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/jit/jit.h"
#include "runtime/cuda/module.h"
#include "tools/cli/command.h"
#include "tools/cli/int_range.h"
#include "tools/cli/store_dir.h"

namespace cpgen::cli {
namespace {

struct CompileOptions {
  std::string spec;
  bool all = false;
  bool defaults = false;
  bool masks = false;
  std::string arch;
  std::string emit_source;
  std::string emit_cubin;
  std::string emit_ptx;
  bool json = false;
  std::string store_dir;
  bool no_store = false;
  int jobs = -1;  // not given: one per CPU, as 0
  std::string filter;
  int repeat = 1;
};

// The arch of GPU 0 where there is one, so that `cpgen compile` builds what this machine runs;
// otherwise the Hopper target the project tunes for.
std::string default_arch() {
  if (cu::device_count() > 0) {
    try {
      return device_arch(0);
    } catch (const Error&) {
    }
  }
  return kFallbackArch;
}

struct StoreChoice {
  std::unique_ptr<DirectoryKernelStore> owned;
  KernelStore* store = nullptr;
  std::string description = "none";
};

StoreChoice choose_store(const CompileOptions& o) {
  StoreChoice c;
  if (o.no_store) return c;
  if (!o.store_dir.empty()) {
    check_store_dir(o.store_dir, "compile");
    c.owned = std::make_unique<DirectoryKernelStore>(o.store_dir);
    c.store = c.owned.get();
  } else {
    check_store_dir(default_kernel_dir(), "compile", "the kernel store ($CPGEN_KERNEL_DIR or the default)",
                    /*writable=*/false);
    c.store = default_kernel_store();
  }
  c.description = c.store->describe();
  return c;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// The --emit options of one kernel, each with the file it names ("" when not given).
std::array<std::pair<const char*, const std::string*>, 3> emit_options(const CompileOptions& o) {
  return {{{"--emit-source", &o.emit_source}, {"--emit-cubin", &o.emit_cubin}, {"--emit-ptx", &o.emit_ptx}}};
}

// Compiles that the store could not keep make a command that fills a store fail (exit 1) with
// one line on stderr: how many, where, and the first reason (a full disk, a dangling link).
// `reasons`: CompiledKernel::not_stored of each kernel ("" for one that was kept).
void report_not_stored(const std::vector<std::string>& reasons, const std::string& store_description) {
  const auto first = std::find_if(reasons.begin(), reasons.end(), [](const std::string& why) { return !why.empty(); });
  if (first == reasons.end()) return;
  const auto count = std::count_if(reasons.begin(), reasons.end(), [](const std::string& why) { return !why.empty(); });
  std::cout.flush();
  std::cerr << "cpgen: " << count << " of " << reasons.size() << " compiled kernel(s) could not be kept in the store ("
            << store_description << "): " << first_line(*first) << "\n";
  set_exit_code(1);
}

void compile_one(const CompileOptions& o, const std::string& arch, KernelStore* store,
                 const std::string& store_description) {
  const KernelSpec spec = KernelSpec::parse(o.spec);  // kBadInput names the field and the values
  const auto emits = emit_options(o);
  for (size_t i = 0; i < std::size(emits); ++i)
    for (size_t j = i + 1; j < std::size(emits); ++j)
      if (!emits[i].second->empty() && !emits[j].second->empty() && same_file(*emits[i].second, *emits[j].second))
        throw_bad_input(std::string(emits[i].first) + " and " + emits[j].first + " name the same file '" +
                        *emits[i].second + "'; give two files");
  for (const auto& [option, file] : emits)
    if (!file->empty()) {
      check_output_file(*file, "compile", option);
      // The templates folder a compile reads (CPGEN_TEMPLATES_DIR: every .cuh file in it) is
      // never written into: --emit-source there replaced the template it then compiled.
      const std::string folder = std::filesystem::path(*file).parent_path().string();
      if (!template_files_dir().empty() && same_file(folder.empty() ? "." : folder, template_files_dir()))
        throw_bad_input(std::string(option) + " '" + *file + "' is in the templates folder " + template_files_dir() +
                        " this compile reads (CPGEN_TEMPLATES_DIR); give a file elsewhere");
    }
  // The user named the kernel: one this arch cannot run (compile_kernel's kInfeasible) is bad
  // input, exit 2; nothing is written before the compile.
  const Feasibility feasibility = check_feasibility(spec, arch);
  CompiledKernel k;
  try {
    k = compile_kernel(spec, arch, store);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kInfeasible) throw;
    throw_bad_input(e.what());  // "<uri> on <arch>: <what does not fit>"
  }
  // Written once the compile succeeded, so a failed one leaves an existing file as it was (the
  // source of a failed compile is saved with its log; the message names the folder).
  if (!o.emit_source.empty()) {
    // One file: the templates it includes inlined, so nvcc compiles it with no cpgen include path.
    write_file_atomically(o.emit_source, "the generated source to " + o.emit_source,
                          flatten_includes(render_source(spec), template_files()));
  }
  if (!o.emit_cubin.empty()) {
    // The cubin exactly as loaded, for `cuobjdump -sass FILE` (or nvdisasm).
    write_file_atomically(o.emit_cubin, "the cubin to " + o.emit_cubin, k.cubin);
  }
  if (!o.emit_ptx.empty()) {
    // The store keeps cubins only: a kernel it served is compiled once more, storing nothing, for
    // the PTX that ptxas turned into that cubin (the same source, options and NVRTC).
    const std::string ptx = k.ptx.empty() ? compile_kernel(spec, arch, nullptr).ptx : k.ptx;
    write_file_atomically(o.emit_ptx, "the PTX to " + o.emit_ptx, ptx);
  }
  const CompileStats& s = k.stats;
  // --repeat: the same request again in this process, as a long-lived runtime would make it;
  // with a store, every repeat is a store read (the "load under 1 ms" target).
  std::vector<double> repeat_ms;
  bool repeats_from_store = true;
  for (int i = 1; i < o.repeat; ++i) {
    CompiledKernel again = compile_kernel(spec, arch, store);
    repeat_ms.push_back(again.stats.compile_ms);
    repeats_from_store = repeats_from_store && again.stats.from_store;
  }
  std::sort(repeat_ms.begin(), repeat_ms.end());
  if (o.json) {
    nlohmann::json out = {{"uri", k.uri},
                          {"arch", k.arch},
                          {"registers", s.registers},
                          {"spill_bytes", s.spill_bytes},
                          {"stack_bytes", s.stack_bytes},
                          {"shared_bytes", s.shared_bytes},
                          {"dynamic_shared_bytes", feasibility.shared_bytes},
                          {"cubin_bytes", s.cubin_bytes},
                          {"compile_ms", s.compile_ms},
                          {"from_store", s.from_store},
                          {"key", k.key},
                          {"code_hash", kernel_code_hash(spec)},
                          {"nvrtc", nvrtc_version()},
                          {"templates", template_files_dir().empty() ? "built in" : template_files_dir()},
                          {"store", store_description}};
    if (!repeat_ms.empty()) {
      out["repeat"] = {{"count", repeat_ms.size()},
                       {"from_store", repeats_from_store},
                       {"min_ms", repeat_ms.front()},
                       {"median_ms", repeat_ms[repeat_ms.size() / 2]},
                       {"p95_ms", repeat_ms[repeat_ms.size() * 95 / 100]},
                       {"max_ms", repeat_ms.back()}};
    }
    std::cout << out.dump(2) << "\n";
    report_not_stored({k.not_stored}, store_description);
    return;
  }
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.3f", s.compile_ms);
  std::cout << k.uri << " for " << k.arch << "\n"
            << "  registers     " << s.registers << "\n"
            << "  spill_bytes   " << s.spill_bytes << "\n"
            << "  stack_bytes   " << s.stack_bytes << "\n"
            << "  shared_bytes  " << s.shared_bytes << " static, " << feasibility.shared_bytes
            << " dynamic at launch\n"
            << "  cubin_bytes   " << s.cubin_bytes << "\n"
            << "  compile_ms    " << ms << (s.from_store ? " (loaded from the store)" : " (NVRTC " + nvrtc_version() + ")") << "\n"
            << "  from_store    " << (s.from_store ? "yes" : "no") << "\n"
            << "  store         " << store_description << "\n";
  if (!template_files_dir().empty())
    std::cout << "  templates     " << template_files_dir() << " (CPGEN_TEMPLATES_DIR)\n";
  if (!repeat_ms.empty()) {
    char line[160];
    std::snprintf(line, sizeof line, "%zu more requests%s: median %.3f ms, max %.3f ms", repeat_ms.size(),
                  repeats_from_store ? " (from the store)" : "", repeat_ms[repeat_ms.size() / 2], repeat_ms.back());
    std::cout << "  repeat        " << line << "\n";
  }
  if (!o.emit_source.empty()) std::cout << "  source        " << o.emit_source << "\n";
  if (!o.emit_cubin.empty()) std::cout << "  cubin         " << o.emit_cubin << "\n";
  if (!o.emit_ptx.empty()) std::cout << "  ptx           " << o.emit_ptx << "\n";
  report_not_stored({k.not_stored}, store_description);
}

enum class Outcome { kCompiled, kCached, kInfeasible, kFailed };

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kCompiled: return "ok";
    case Outcome::kCached: return "cached";
    case Outcome::kInfeasible: return "infeasible";
    case Outcome::kFailed: return "failed";
  }
  return "unknown";
}

struct Job {
  KernelSpec spec;
  Outcome outcome = Outcome::kFailed;
  CompileStats stats;
  std::string reason;      // why infeasible or failed (one line)
  std::string not_stored;  // why the store could not keep a fresh compile
};

// Every candidate of every supported combination, forward and backward (step and preprocessing
// kernels), each URI once, and on sm_90a every default of the wgmma family with its ping-pong
// variant and persistent launch; with `defaults_only` the forward and backward defaults of every
// combination instead of their candidates (the wgmma ones as before). `--filter bwd` selects the
// backward kinds, `fwd` the forward ones, `wgmma` the sm_90a family. With `masks`, each step
// kernel (forward of either family, backward) also comes in its three mask variants: key
// intervals (_ivl: sliding windows, packed documents), softcap (_cap) and both, what masked
// problems load in its place.
std::vector<Job> all_jobs(const std::string& filter, const std::string& arch, bool defaults_only, bool masks) {
  std::vector<Job> jobs;
  std::set<std::string> seen;
  auto add_one = [&](const KernelSpec& spec) {
    const std::string uri = spec.uri();
    if (!filter.empty() && uri.find(filter) == std::string::npos) return;
    if (seen.insert(uri).second) jobs.push_back(Job{spec, Outcome::kFailed, {}, {}, {}});
  };
  auto add = [&](const KernelSpec& spec) {
    add_one(spec);
    const bool step = runs_step(spec.kind, false) || runs_step(spec.kind, true);
    if (!masks || !step || spec.key_intervals || spec.softcap) return;
    for (const auto& [intervals, softcap] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
      KernelSpec variant = spec;
      variant.key_intervals = intervals;
      variant.softcap = softcap;
      add_one(variant);
    }
  };
  if (defaults_only) {
    // Each default as the runtime picks it for this arch (smaller tiles where the documented
    // default does not fit), forward then backward, then the backward's other kernels.
    for (const KernelSpec& c : KernelSpec::all_defaults())
      add(KernelSpec::default_for_arch(c.dtype, c.head_dim, c.causal, c.gqa_group, arch));
    for (const KernelSpec& c : KernelSpec::all_defaults())
      add(KernelSpec::backward_default_for_arch(c.dtype, c.head_dim, c.causal, c.gqa_group, arch));
    for (const KernelSpec& spec : KernelSpec::backward_defaults())
      if (spec.kind != KernelKind::kBackwardStep) add(spec);
  } else {
    for (const KernelSpec& combo : KernelSpec::all_defaults()) {
      for (const KernelSpec& spec :
           KernelSpec::candidates_for(combo.dtype, combo.head_dim, combo.causal, combo.gqa_group))
        add(spec);
    }
    for (const KernelSpec& combo : KernelSpec::all_defaults()) {
      for (const KernelSpec& spec : KernelSpec::backward_candidates_for(combo.dtype, combo.head_dim,
                                                                        combo.causal, combo.gqa_group))
        add(spec);
    }
    for (const KernelSpec& spec : KernelSpec::backward_defaults()) add(spec);  // with the pre and convert kernels
  }
  if (arch == kWgmmaArch)
    for (KernelSpec spec : wgmma_defaults()) {
      add(spec);
      spec.pingpong = true;  // the tuner's other schedule of the same tiles
      add(spec);
      spec.pingpong = false;
      spec.persistent = true;  // and its other launch
      add(spec);
    }
  return jobs;
}

class Progress {
 public:
  Progress(const char* mode, size_t total, bool quiet) : mode_(mode), total_(total), quiet_(quiet), tty_(::isatty(2)) {}
  void done(Outcome o) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_[static_cast<int>(o)];
    ++finished_;
    if (quiet_) return;
    // On a terminal one line is rewritten; in a log, a line per tenth of the work.
    const bool step = finished_ == total_ || finished_ * 10 / total_ != (finished_ - 1) * 10 / total_;
    if (!tty_ && !step) return;
    std::fprintf(stderr, "%scompile %s: %zu/%zu  ok %zu  cached %zu  infeasible %zu  failed %zu%s",
                 tty_ ? "\r" : "", mode_, finished_, total_, counts_[0], counts_[1], counts_[2], counts_[3],
                 tty_ && finished_ < total_ ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  std::mutex mutex_;
  const char* mode_;
  size_t total_, finished_ = 0;
  size_t counts_[4] = {0, 0, 0, 0};
  bool quiet_, tty_;
};

void compile_all(const CompileOptions& o, const std::string& arch, KernelStore* store,
                 const std::string& store_description) {
  const char* mode = o.all ? "--all" : "--defaults";
  for (const auto& [option, file] : emit_options(o))
    if (!file->empty()) throw_bad_input(std::string(option) + " needs --spec (one kernel), not " + mode);
  std::vector<Job> jobs = all_jobs(o.filter, arch, o.defaults, o.masks);
  if (jobs.empty()) throw_bad_input("--filter '" + o.filter + "' matches no " + (o.all ? "candidate" : "default") + " kernel URI");
  const int workers = std::max(1, std::min<int>(o.jobs > 0 ? o.jobs : static_cast<int>(std::thread::hardware_concurrency()),
                                                static_cast<int>(jobs.size())));
  const auto start = std::chrono::steady_clock::now();
  Progress progress(mode, jobs.size(), false);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      Job& job = jobs[i];
      const Feasibility f = check_feasibility(job.spec, arch);
      if (!f.feasible) {
        job.outcome = Outcome::kInfeasible;
        job.reason = f.reason;
      } else {
        try {
          CompiledKernel k = compile_kernel(job.spec, arch, store);
          job.stats = k.stats;
          job.not_stored = k.not_stored;
          job.outcome = k.stats.from_store ? Outcome::kCached : Outcome::kCompiled;
        } catch (const Error& e) {
          job.outcome = e.kind() == ErrorKind::kInfeasible ? Outcome::kInfeasible : Outcome::kFailed;
          job.reason = first_line(e.what());
        } catch (const std::exception& e) {
          job.outcome = Outcome::kFailed;
          job.reason = first_line(e.what());
        }
      }
      progress.done(job.outcome);
    }
  };
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  size_t counts[4] = {0, 0, 0, 0};
  for (const Job& job : jobs) ++counts[static_cast<int>(job.outcome)];
  if (o.json) {
    nlohmann::json kernels = nlohmann::json::array();
    for (const Job& job : jobs) {
      nlohmann::json entry = {{"uri", job.spec.uri()}, {"status", outcome_name(job.outcome)}};
      if (job.outcome == Outcome::kCompiled || job.outcome == Outcome::kCached) {
        entry["spill_bytes"] = job.stats.spill_bytes;
        entry["registers"] = job.stats.registers;
        entry["compile_ms"] = job.stats.compile_ms;
      } else {
        entry["spill_bytes"] = nullptr;
        entry["reason"] = job.reason;
      }
      kernels.push_back(entry);
    }
    nlohmann::json out = {{"arch", arch},
                          {"store", store_description},
                          {"kernels", kernels},
                          {"summary",
                           {{"total", jobs.size()},
                            {"compiled", counts[0]},
                            {"cached", counts[1]},
                            {"infeasible", counts[2]},
                            {"failed", counts[3]},
                            {"seconds", seconds},
                            {"jobs", workers}}}};
    std::cout << out.dump(2) << "\n";
  } else {
    size_t spilling = 0;
    for (const Job& job : jobs) {
      if (job.outcome == Outcome::kFailed) std::cout << "failed      " << job.spec.uri() << ": " << job.reason << "\n";
      if ((job.outcome == Outcome::kCompiled || job.outcome == Outcome::kCached) && job.stats.spill_bytes > 0) {
        std::cout << "spills      " << job.spec.uri() << ": " << job.stats.spill_bytes << " bytes\n";
        ++spilling;
      }
    }
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", seconds);
    std::cout << jobs.size() << " kernels for " << arch << ": compiled " << counts[0] << ", cached "
              << counts[1] << ", infeasible " << counts[2] << ", failed " << counts[3] << " ("
              << spilling << " spilling; " << secs << " s with " << workers << " jobs; store "
              << store_description << ")\n";
  }
  if (counts[3] > 0) set_exit_code(1);
  std::vector<std::string> not_stored;
  for (const Job& job : jobs)
    if (job.outcome == Outcome::kCompiled || job.outcome == Outcome::kCached) not_stored.push_back(job.not_stored);
  report_not_stored(not_stored, store_description);
}

void run(const CompileOptions& o) {
  if (!o.spec.empty() + o.all + o.defaults != 1)
    throw_bad_input("compile needs exactly one of --spec URI, --all or --defaults");
  if (!o.all && !o.defaults && !o.filter.empty()) throw_bad_input("--filter applies to --all and --defaults only");
  if (!o.all && !o.defaults && o.masks)
    throw_bad_input("--masks applies to --all and --defaults only (with --spec, name the variant: _ivl, _cap or _ivl_cap)");
  if (o.repeat < 1) throw_bad_input("--repeat " + std::to_string(o.repeat) + " is not allowed; it must be at least 1");
  if (o.spec.empty() && o.repeat != 1) throw_bad_input("--repeat applies to --spec only");
  if (!o.spec.empty() && o.jobs != -1) throw_bad_input("--jobs applies to --all and --defaults only (--spec compiles one kernel)");
  if (o.no_store && !o.store_dir.empty()) throw_bad_input("compile: give --store DIR or --no-store, not both");
  const std::string arch = o.arch.empty() ? default_arch() : o.arch;
  validate_arch(arch);
  StoreChoice store = choose_store(o);
  if (o.spec.empty()) {
    compile_all(o, arch, store.store, store.description);
  } else {
    compile_one(o, arch, store.store, store.description);
  }
}

const CommandRegistrar kCompile("compile", [](CLI::App& root) {
  auto options = std::make_shared<CompileOptions>();
  CLI::App* cmd = root.add_subcommand(
      "compile", "Compile kernels with NVRTC through the kernel store and report ptxas resources");
  cmd->add_option("--spec", options->spec,
                  "Kernel URI, e.g. ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2");
  cmd->add_flag("--all", options->all,
                "Compile every candidate of every supported combination, forward and backward, and on sm_90a every "
                "wgmma default, its ping-pong variant and its persistent launch (prunes infeasible ones)");
  cmd->add_flag("--defaults", options->defaults,
                "Compile the default kernel of every supported combination, forward and backward (with the backward's "
                "preprocessing and conversion kernels), and on sm_90a the wgmma defaults with their variants: what a "
                "runtime without a tuning database loads, so a store can be filled before a job");
  cmd->add_flag("--masks", options->masks,
                "With --all or --defaults: each step kernel also in its mask variants, key intervals (_ivl: sliding "
                "windows, packed documents), softcap (_cap) and both, which masked problems load in its place");
  cmd->add_option("--arch", options->arch,
                  "Target: " + supported_archs_text() + " (default: GPU 0's arch, else sm_90a)");
  cmd->add_option("--emit-source", options->emit_source, "Also write the generated CUDA source to FILE (with --spec), the templates it includes inlined: one file nvcc compiles");
  cmd->add_option("--emit-cubin", options->emit_cubin,
                  "Also write the compiled cubin to FILE (with --spec), for cuobjdump -sass FILE");
  cmd->add_option("--emit-ptx", options->emit_ptx,
                  "Also write the PTX that NVRTC gave ptxas to FILE (with --spec): beside the SASS, it shows "
                  "what ptxas reordered");
  cmd->add_flag("--json", options->json, "Print JSON instead of text");
  cmd->add_option("--store", options->store_dir,
                  "Kernel store directory (default: $CPGEN_KERNEL_DIR, $XDG_CACHE_HOME/cpgen/kernels, ~/.cache/cpgen/kernels or $TMPDIR/cpgen-<uid>/kernels)");
  cmd->add_flag("--no-store", options->no_store, "Always run NVRTC and store nothing");
  cmd->add_option("--jobs,-j", options->jobs, "Parallel compiles for --all and --defaults (default: CPU count)")
      ->check(int_range(0, 1024, " (0: one per CPU)"));
  cmd->add_option("--filter", options->filter,
                  "With --all or --defaults: only URIs containing this text (e.g. fwd, bwd, bwd_pre, hd128)");
  cmd->add_option("--repeat", options->repeat,
                  "With --spec: request the kernel N times in this process and report the repeat times (benchmarks the store)")
      ->check(int_range(1, 1000000));
  cmd->callback([options] { run(*options); });
});

}  // namespace
}  // namespace cpgen::cli
