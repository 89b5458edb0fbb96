#include "runtime/jit/jit.h"

#include <dlfcn.h>
#include <nvrtc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <memory>

#include "cpgen/error.h"
#include "cpgen/traits_wgmma.cuh"
#include "generator/template_files.h"
#include "generator/kernel_spec_wgmma.h"
#include "generator/render.h"
#include "runtime/core/json_text.h"
#include "runtime/jit/compile_log.h"
#include "runtime/jit/nvrtc_check.h"
#include "runtime/jit/ptxas_log.h"
#include "runtime/core/sha256.h"
#include "runtime/core/user_cache_dir.h"

namespace cpgen {

namespace nvrtc {

void raise(nvrtcResult status, const char* call, const char* file, int line) {
  throw Error(ErrorKind::kCompile, std::string(call) + " failed at " + file + ":" +
                                       std::to_string(line) + ": " + nvrtcGetErrorString(status));
}

}  // namespace nvrtc

namespace {

std::atomic<uint64_t> g_compile_count{0};

// Destroys the program on every path, including exceptions.
struct ProgramGuard {
  nvrtcProgram program = nullptr;
  ~ProgramGuard() {
    if (program) nvrtcDestroyProgram(&program);
  }
};

// NVRTC ships no C library, so <cstdint> does not exist under it; headers shared by host and
// device (params.cuh includes <cstdint> only outside NVRTC) get the fixed-width integer types from
// this prelude, pre-included into every program. The widths follow the host's LP64 ABI so that a
// struct passed by value has the same layout on both sides.
constexpr const char* kPreludeName = "cpgen/nvrtc_prelude.cuh";
constexpr const char* kPreludeSource =
    "// pre-included by cpgen's JIT into every NVRTC program\n"
    "#pragma once\n"
    "typedef signed char int8_t;\n"
    "typedef unsigned char uint8_t;\n"
    "typedef short int16_t;\n"
    "typedef unsigned short uint16_t;\n"
    "typedef int int32_t;\n"
    "typedef unsigned int uint32_t;\n"
    "typedef long int64_t;\n"
    "typedef unsigned long uint64_t;\n"
    "typedef long intptr_t;\n"
    "typedef unsigned long uintptr_t;\n"
    "static_assert(sizeof(int64_t) == 8 && sizeof(intptr_t) == sizeof(void*), \"cpgen assumes LP64\");\n";

// The headers handed to NVRTC by name: the embedded templates and the prelude.
std::vector<EmbeddedTemplate> program_headers() {
  std::vector<EmbeddedTemplate> headers(template_files().begin(), template_files().end());
  headers.push_back({kPreludeName, kPreludeSource, std::char_traits<char>::length(kPreludeSource)});
  return headers;
}

// Digest of the headers NVRTC reads for `source`: the prelude it pre-includes and the templates
// the source includes, directly or not (included_templates). A template no kernel of a family
// includes (step_bwd.cuh for a forward kernel) leaves that family's keys alone.
// Memoized by the source's own include lines, which decide the rest (a process's templates are
// fixed): every kernel of a family includes the same header, so a family is hashed once.
std::string included_headers_digest(const std::string& source) {
  static std::mutex mutex;
  static std::map<std::string, std::string> known;
  std::string includes;
  for (std::string_view name : include_names(source)) (includes += name) += '\n';
  {
    std::lock_guard lock(mutex);
    if (auto it = known.find(includes); it != known.end()) return it->second;
  }
  Sha256 h;
  h.update_field(kPreludeName);
  h.update_field(kPreludeSource);
  for (const EmbeddedTemplate& t : included_templates(source, template_files())) {
    h.update_field(t.name);
    h.update_field(std::string_view(t.contents, t.size));
  }
  std::string digest = h.hex_digest();
  std::lock_guard lock(mutex);
  known.emplace(includes, digest);
  return digest;
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::string program_log(nvrtcProgram program) {
  size_t size = 0;
  CPGEN_NVRTC_CHECK(nvrtcGetProgramLogSize(program, &size));
  std::string log(size, '\0');
  CPGEN_NVRTC_CHECK(nvrtcGetProgramLog(program, log.data()));
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

// Saves what a user needs to reproduce a failed compile outside cpgen: the source as NVRTC saw
// it, the embedded headers under their include names, the options and the log. Returns the path
// of the source file, or a note saying why nothing could be saved (the error must still be raised).
// The path of the saved source, nullopt where it could not be saved.
std::optional<std::string> save_failed_compile(const std::string& name, const std::string& key,
                                               const std::string& source, const std::vector<std::string>& options,
                                               const std::string& log) {
  namespace fs = std::filesystem;
  try {
    fs::path dir = fs::path(failed_compile_dir()) / (name + "-" + key.substr(0, 12));
    fs::create_directories(dir);
    for (const EmbeddedTemplate& t : program_headers()) {
      fs::path header = dir / t.name;
      fs::create_directories(header.parent_path());
      std::ofstream(header, std::ios::binary).write(t.contents, static_cast<std::streamsize>(t.size));
    }
    std::ofstream(dir / "options.txt") << join(options) << "\n";
    std::ofstream(dir / "nvrtc.log") << log << "\n";
    fs::path source_path = dir / (name + ".cu");
    std::ofstream out(source_path, std::ios::binary);
    out << source;
    out.close();
    if (!out) return std::nullopt;
    return source_path.string();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::vector<std::string> compile_options(std::string_view arch) {
  validate_arch(arch);
  std::vector<std::string> options = {
      "-std=c++17",
      "--gpu-architecture=" + std::string(arch),  // sm_90a: the arch-specific target (wgmma, setmaxnreg)
      "-default-device",                          // template helpers need no __device__ annotation
      "--ptxas-options=--verbose",                // registers, spills, stack and smem into the log
      // FMA contraction on (NVRTC's default, stated so the key records it): a fused a*b+c rounds
      // once, so it is never less accurate than the separate multiply and add. -use_fast_math is
      // NOT used: it would also flush fp32 denormals, approximate division and log/exp library
      // calls, silently changing the final o/l normalization and the natural-log LSE that are
      // checked against float64 references. The templates call fast intrinsics (exp2 via
      // ex2.approx) explicitly where their error is accounted for.
      "--fmad=true",
      std::string("--pre-include=") + kPreludeName,
      // No -I: the templates need no toolkit or standard header, so nothing outside the
      // embedded headers is read and the key does not depend on where CUDA is installed.
  };
  // NVRTC 12.9 and later keep their own cache of ptxas results, which a machine with a driver
  // uses: a second compile of the same program, in any process, skips ptxas and its log holds no
  // resource lines, so the kernel's registers, spills and shared memory could not be read (seen
  // on the first H100, 2026-11-26: most GPU tests failed "the program has no kernel named").
  // cpgen's kernel store is the cache; NVRTC's is turned off wherever it exists.
  if (nvrtc_has_own_cache()) options.push_back("--no-cache");
  return options;
}

namespace {

// The loaded NVRTC's {major, minor}, asked once.
std::pair<int, int> nvrtc_version_numbers() {
  static const std::pair<int, int> version = [] {
    int major = 0, minor = 0;
    CPGEN_NVRTC_CHECK(nvrtcVersion(&major, &minor));
    return std::pair{major, minor};
  }();
  return version;
}

}  // namespace

bool nvrtc_has_own_cache() { return nvrtc_version_numbers() >= std::pair{12, 9}; }

std::string nvrtc_version() {
  const auto [major, minor] = nvrtc_version_numbers();
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string nvrtc_version_tag() {
  static const std::string tag = [] {
    std::string out = nvrtc_version();
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) && info.dli_fname) {
      struct stat st;
      if (::stat(info.dli_fname, &st) == 0) out += "/" + std::to_string(st.st_size);
    }
    return out;
  }();
  return tag;
}

std::string kernel_store_key(const std::string& kernel_name, const std::string& source,
                             std::string_view arch) {
  Sha256 h;
  h.update_field("cpgen kernel key 1");
  h.update_field(kernel_name);
  h.update_field(source);
  h.update_field(included_headers_digest(source));
  for (const std::string& option : compile_options(arch)) h.update_field(option);
  h.update_field(nvrtc_version_tag());
  h.update_field(arch);
  return h.hex_digest();
}

std::string kernel_code_hash(const KernelSpec& spec) {
  const std::string source = render_source(spec);
  Sha256 h;
  h.update_field("cpgen kernel code 1");
  h.update_field(source);
  h.update_field(included_headers_digest(source));
  return h.hex_digest().substr(0, 16);
}

uint64_t nvrtc_compile_count() { return g_compile_count.load(); }

std::string failed_compile_dir() { return user_temp_dir("failed"); }

namespace {

// One NVRTC compile of `source`; throws Error(kCompile) with the log and the saved source.
CompiledKernel run_nvrtc(const std::string& kernel_name, const std::string& source,
                         std::string_view arch, const std::string& key,
                         const std::vector<std::string>& options) {
  std::vector<const char*> header_contents, header_names;
  const std::vector<EmbeddedTemplate> headers = program_headers();
  for (const EmbeddedTemplate& t : headers) {
    header_contents.push_back(t.contents);
    header_names.push_back(t.name);
  }
  std::vector<const char*> option_ptrs;
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());

  ProgramGuard guard;
  CPGEN_NVRTC_CHECK(nvrtcCreateProgram(&guard.program, source.c_str(), kernel_name.c_str(),
                                       static_cast<int>(header_contents.size()),
                                       header_contents.data(), header_names.data()));
  ++g_compile_count;
  nvrtcResult status =
      nvrtcCompileProgram(guard.program, static_cast<int>(option_ptrs.size()), option_ptrs.data());
  std::string log = program_log(guard.program);

  auto fail = [&](const std::string& what) -> CompiledKernel {
    const std::optional<std::string> saved = save_failed_compile(kernel_name, key, source, options, log);
    // Where the save failed the whole log has nowhere else to go: the message keeps it.
    std::string flat_log = log;
    std::replace(flat_log.begin(), flat_log.end(), '\n', ' ');
    throw Error(ErrorKind::kCompile,
                "NVRTC could not compile " + kernel_name + " for " + std::string(arch) + " (" + what + "): " +
                    log_summary(log) +
                    (saved ? "; source saved to " + *saved + "; the whole log in nvrtc.log beside it"
                           : "; the source could not be saved; log: " + printable(flat_log, 4000)) +
                    "; options: " + join(options));
  };
  if (status == NVRTC_ERROR_COMPILATION) {
    // A resource check of the traits failed: the config does not fit, which the tuner records
    // as infeasible; the feasibility model should have caught it first (the reason names the check).
    if (std::optional<std::string> reason = traits_assertion_failure(log)) {
      throw Error(ErrorKind::kInfeasible, kernel_name + " on " + std::string(arch) + ": " + *reason +
                                              " (static_assert in cpgen/traits.cuh; the feasibility model "
                                              "did not predict it); options: " + join(options));
    }
  }
  if (status != NVRTC_SUCCESS) return fail(nvrtcGetErrorString(status));

  std::optional<KernelResources> resources = kernel_resources(log, kernel_name);
  if (!resources) return fail("the program has no kernel named " + kernel_name);

  CompiledKernel k;
  k.uri = kernel_name;
  k.arch = std::string(arch);
  k.key = key;
  size_t cubin_size = 0;
  CPGEN_NVRTC_CHECK(nvrtcGetCUBINSize(guard.program, &cubin_size));
  k.cubin.resize(cubin_size);
  CPGEN_NVRTC_CHECK(nvrtcGetCUBIN(guard.program, k.cubin.data()));
  size_t ptx_size = 0;
  CPGEN_NVRTC_CHECK(nvrtcGetPTXSize(guard.program, &ptx_size));
  k.ptx.resize(ptx_size);
  CPGEN_NVRTC_CHECK(nvrtcGetPTX(guard.program, k.ptx.data()));
  while (!k.ptx.empty() && k.ptx.back() == '\0') k.ptx.pop_back();
  k.log = log;
  k.stats.registers = resources->registers;
  k.stats.spill_bytes = resources->spill_bytes;
  k.stats.stack_bytes = resources->stack_bytes;
  k.stats.shared_bytes = resources->shared_bytes;
  k.stats.cubin_bytes = static_cast<int>(k.cubin.size());
  k.stats.from_store = false;
  return k;
}

// Requests for a key that another thread is compiling right now wait for that compile instead of
// starting their own (N virtual ranks of one process ask for the same kernel at the same moment).
struct InFlight {
  std::mutex mutex;
  std::map<std::string, std::shared_future<CompiledKernel>> compiles;
};

InFlight& in_flight() {
  static InFlight instance;
  return instance;
}

}  // namespace

CompiledKernel compile_source(const std::string& kernel_name, const std::string& source,
                              std::string_view arch, KernelStore* store) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::string> options = compile_options(arch);
  const std::string key = kernel_store_key(kernel_name, source, arch);
  auto from_store = [&]() -> std::optional<CompiledKernel> {
    if (!store) return std::nullopt;
    std::optional<CompiledKernel> stored = store->get(key);
    if (!stored || stored->uri != kernel_name || stored->arch != arch) return std::nullopt;
    stored->stats.compile_ms = ms_since(start);
    return stored;
  };
  if (auto stored = from_store()) return *stored;

  InFlight& flight = in_flight();
  std::promise<CompiledKernel> promise;
  std::shared_future<CompiledKernel> running;
  {
    std::lock_guard<std::mutex> lock(flight.mutex);
    auto it = flight.compiles.find(key);
    if (it != flight.compiles.end()) {
      running = it->second;
    } else {
      flight.compiles.emplace(key, promise.get_future().share());
    }
  }
  if (running.valid()) {
    CompiledKernel k = running.get();  // rethrows the compile error of the thread that compiled
    k.stats.compile_ms = ms_since(start);
    k.stats.from_store = false;
    return k;
  }

  // This thread compiles. A store entry written by another process since the lookup above is
  // not re-checked: compiling again is correct, only slower, and keeps the common path short.
  auto finish = [&] {
    std::lock_guard<std::mutex> lock(flight.mutex);
    flight.compiles.erase(key);
  };
  // Whatever leaves this block, the waiting threads get it and the key leaves the table: an
  // exception that skipped both left a broken promise there for every later request of the key.
  CompiledKernel k;
  try {
    k = run_nvrtc(kernel_name, source, arch, key, options);
    k.stats.compile_ms = ms_since(start);
    keep_in_store(store, k);
  } catch (...) {
    promise.set_exception(std::current_exception());
    finish();
    throw;
  }
  promise.set_value(k);
  finish();
  return k;
}

std::string wgmma_register_plan_problem(const KernelSpec& spec, int registers) {
  if (spec.kind != KernelKind::kForwardWgmma || registers <= 0) return "";  // <= 0: not known
  const int pool = registers * spec.threads();
  const int plan = device::wgmma_register_plan(wgmma_consumers(spec), spec.persistent);
  const int producer = device::wgmma_producer_registers(spec.persistent);
  const int consumer = device::wgmma_consumer_registers(wgmma_consumers(spec), spec.persistent);
  const char* problem = pool < plan ? "the consumers' setmaxnreg.inc would wait forever for registers"
                        : registers > consumer ? "the consumers' setmaxnreg.inc would shrink them"
                                               : nullptr;
  if (!problem) return "";
  return "ptxas allocated " + std::to_string(registers) + " registers per thread at entry (" + std::to_string(pool) +
         " for the CTA); setmaxnreg asks " + std::to_string(producer) + " for the producer and " +
         std::to_string(consumer) + " for each consumer thread (" + std::to_string(plan) + "): " + problem;
}

CompiledKernel compile_kernel(const KernelSpec& spec, std::string_view arch, KernelStore* store) {
  validate_arch(arch);
  Feasibility feasibility = check_feasibility(spec, arch);
  if (!feasibility.feasible) {
    throw Error(ErrorKind::kInfeasible, spec.uri() + " on " + std::string(arch) + ": " + feasibility.reason);
  }
  // compile_ms covers rendering too: it is what a caller waits for, the number the "store load
  // under 1 ms" target is about.
  const auto start = std::chrono::steady_clock::now();
  CompiledKernel k = compile_source(spec.uri(), render_source(spec), arch, store);
  k.stats.compile_ms = ms_since(start);
  const std::string registers = wgmma_register_plan_problem(spec, k.stats.registers);
  if (!registers.empty())
    throw Error(ErrorKind::kInfeasible, spec.uri() + " on " + std::string(arch) + ": " + registers);
  return k;
}

}  // namespace cpgen
