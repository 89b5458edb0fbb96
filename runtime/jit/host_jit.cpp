#include "runtime/jit/host_jit.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "runtime/jit/compile_log.h"
#include "cpgen/error.h"
#include "generator/template_files.h"
#include "generator/render.h"
#include "runtime/core/sha256.h"
#include "runtime/core/user_cache_dir.h"

extern char** environ;

namespace cpgen {
namespace fs = std::filesystem;
namespace {

std::atomic<int> g_host_compiles{0};
std::atomic<int> g_runtime_compiles{0};

constexpr const char* kInstallHint =
    "install a C++ compiler (Debian/Ubuntu: apt-get install g++) or set CXX to one";

bool is_executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

// `name` as a path when it has a slash, else the first match on the colon-separated `path_env`.
std::string resolve_program(const std::string& name, const std::string& path_env) {
  if (name.find('/') != std::string::npos) return is_executable(name) ? name : "";
  std::stringstream dirs(path_env);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const fs::path candidate = fs::path(dir) / name;
    if (is_executable(candidate)) return candidate.string();
  }
  return "";
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const char* data, size_t size) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  if (ec) throw Error(ErrorKind::kIo, "emulated compile: cannot create " + p.parent_path().string() + ": " + ec.message());
  errno = 0;
  std::ofstream out(p, std::ios::binary);
  out.write(data, static_cast<std::streamsize>(size));
  out.close();
  if (!out)
    throw Error(ErrorKind::kIo, "emulated compile: cannot write " + p.string() + ": " +
                                    (errno ? std::strerror(errno) : "the write failed"));
}

// Runs argv with stdout and stderr into `log_path`; returns the exit status (-1: not started).
int run_logged(const std::vector<std::string>& argv, const fs::path& log_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int started = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (started != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

fs::path make_work_dir(const std::string& uri) {
  // Per user and private (user_temp_dir): a shared /tmp/cpgen/emulated made by one user (0755)
  // refused every other one, and one another user made could swap the object this process loads.
  const fs::path base = user_temp_dir("emulated");
  std::string pattern = (base / (uri.substr(0, 80) + "-XXXXXX")).string();
  if (!::mkdtemp(pattern.data()))
    throw Error(ErrorKind::kIo, "emulated compile: cannot create a folder under " + base.string() + ": " +
                                    std::strerror(errno));
  return pattern;
}

const char* params_type(KernelKind kind) {
  switch (kind) {
    case KernelKind::kForwardStep: return "cpgen::RingFwdParams";
    case KernelKind::kBackwardStep: return "cpgen::RingBwdParams";
    case KernelKind::kBackwardPre: return "cpgen::RingBwdPreParams";
    case KernelKind::kBackwardConvert: return "cpgen::RingBwdConvertParams";
    case KernelKind::kForwardWgmma: return "cpgen::RingFwdWgmmaParams";
  }
  throw Error(ErrorKind::kInternal, "emulated_source: unhandled kernel kind " +
                                        std::to_string(static_cast<int>(kind)));
}

}  // namespace

std::string find_host_compiler(const char* cxx_env, const std::string& path_env) {
  if (cxx_env && *cxx_env) {
    const std::string found = resolve_program(cxx_env, path_env);
    if (found.empty())
      throw Error(ErrorKind::kCompile, std::string("the emulated backend compiles kernels with $CXX, and CXX=") +
                                           cxx_env + " is not an executable file on PATH; " + kInstallHint);
    return found;
  }
  for (const char* name : {"c++", "g++", "clang++"})
    if (std::string found = resolve_program(name, path_env); !found.empty()) return found;
  throw Error(ErrorKind::kCompile,
              "the emulated backend needs a host C++ compiler and found none (CXX is unset; no c++, g++ or "
              "clang++ on PATH); " + std::string(kInstallHint));
}

const HostCompiler& host_compiler() {
  static std::mutex mutex;
  static HostCompiler compiler;
  std::lock_guard<std::mutex> lock(mutex);
  if (compiler.path.empty()) {
    const char* path_env = std::getenv("PATH");
    HostCompiler found;
    found.path = find_host_compiler(std::getenv("CXX"), path_env ? path_env : "");
    // The version line separates compilers behind one name (c++ pointing at g++-12 or g++-13).
    fs::path dir = make_work_dir("version");
    run_logged({found.path, "--version"}, dir / "version.txt");
    const std::string text = read_text(dir / "version.txt");
    fs::remove_all(dir);
    found.identity = found.path + " | " + text.substr(0, text.find('\n'));
    compiler = found;
  }
  return compiler;
}

std::vector<std::string> host_compile_flags() {
  // -fvisibility=hidden: the object's copy of the emulator never binds to another copy in the
  // process (the test binary has one); only the entry points are exported. -O2: the emulated mma
  // and fiber switches dominate, and unoptimized they are several times slower.
  // CPGEN_EMULATION_HOPPER: the sm_90a primitives' run time (mbarriers, TMA, wgmma) is in the
  // shared run-time object, whose compile is paid once.
  return {"-std=c++20", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-fno-semantic-interposition",
          "-DCPGEN_EMULATION_HOPPER=1"};
}

std::string emulated_source(const KernelSpec& spec) {
  // The emulator's header, the kernel, the entry points; the emulator's run time is compiled once
  // into an object of its own (emulator_runtime_source) and linked in.
  std::string src = "// cpgen emulated kernel: the generated source on the CUDA emulator, its C entry points\n"
                    "#include \"cpgen/emulation/cuda_emulation.h\"\n"
                    "#include \"cpgen/emulation/emulated_launch.h\"\n\n";
  src += render_source(spec);
  // A persistent wgmma kernel's work counter: one zeroed word per launch, a buffer of the launch
  // like any other (its atomics are checked against it).
  const bool counter = spec.kind == KernelKind::kForwardWgmma && spec.persistent;
  // The emulator's Approximation takes the C entry's numbers (it cannot include the entry's header).
  src += "\nstatic_assert(static_cast<int>(cpgen::emulation::Approximation::kCorrectlyRounded) == CPGEN_APPROX_CORRECTLY_ROUNDED &&\n"
         "              static_cast<int>(cpgen::emulation::Approximation::kHigh) == CPGEN_APPROX_HIGH &&\n"
         "              static_cast<int>(cpgen::emulation::Approximation::kLow) == CPGEN_APPROX_LOW &&\n"
         "              static_cast<int>(cpgen::emulation::Approximation::kMixed) == CPGEN_APPROX_MIXED);\n";
  src += "\nextern \"C\" __attribute__((visibility(\"default\"))) int cpgen_emulated_launch(CpgenEmulatedLaunch* launch) {\n"
         "  std::string error;\n"
         "  if (launch->abi_version != CPGEN_EMULATED_ABI) {\n"
         "    error = \"entry point ABI \" + std::to_string(CPGEN_EMULATED_ABI) + \", caller's \" +\n"
         "            std::to_string(launch->abi_version);\n"
         "  } else if (launch->approximation < CPGEN_APPROX_CORRECTLY_ROUNDED || launch->approximation > CPGEN_APPROX_MIXED) {\n"
         "    error = \"approximation \" + std::to_string(launch->approximation) + \" is not one of 0 to 3\";\n"
         "  } else {\n"
         "    cpgen::emulation::set_approximation(static_cast<cpgen::emulation::Approximation>(launch->approximation));\n"
         "    const auto& params = *static_cast<const " + std::string(params_type(spec.kind)) + "*>(launch->params);\n"
         "    try {\n"
         "      std::vector<cpgen::emulation::GlobalBuffer> buffers;\n"
         "      for (int i = 0; i < launch->buffer_count; ++i)\n"
         "        buffers.push_back({launch->buffers[i].data, launch->buffers[i].bytes, launch->buffers[i].read_counts,\n"
         "                           launch->buffers[i].poisoned != 0});\n" +
         std::string(counter ? "      unsigned work_counter = 0;\n"
                               "      if (!buffers.empty())  // none: no address is checked\n"
                               "        buffers.push_back({&work_counter, sizeof work_counter, nullptr, false});\n"
                             : "") +
         "      cpgen::emulation::set_global_buffers(buffers.data(), static_cast<int>(buffers.size()));\n"
         "      error = cpgen::emulation::launch(launch->grid_x, launch->grid_y, launch->grid_z, launch->threads,\n"
         "                                       launch->shared_bytes, [&] { " + spec.uri() +
         (counter ? "(params, &work_counter); });\n" : "(params); });\n") +
         "    } catch (const std::exception& e) {\n"
         "      error = e.what();\n"
         "    }\n"
         "  }\n"
         "  if (error.empty()) return 0;\n"
         "  snprintf(launch->error, sizeof launch->error, \"%s\", error.c_str());\n"
         "  return 1;\n"
         "}\n"
         "\nextern \"C\" __attribute__((visibility(\"default\"))) int cpgen_emulated_fault(void* address) {\n"
         "  return cpgen::emulation::recover_from_fault(address) ? 1 : 0;\n"
         "}\n";
  return src;
}

std::string emulator_runtime_source() {
  return "// cpgen: the CUDA emulator's run time, linked into every emulated kernel\n"
         "#include \"cpgen/emulation/cuda_emulation.h\"\n"
         "#include \"cpgen/emulation/cuda_emulation.cpp\"\n";
}

std::string emulated_store_key(const std::string& source, const HostCompiler& compiler) {
  Sha256 h;
  h.update_field("cpgen emulated kernel key 2");
  h.update_field(source);
  for (const auto files : {template_files(), embedded_emulation()})
    for (const EmbeddedTemplate& t : files) {
      h.update_field(t.name);
      h.update_field(std::string_view(t.contents, t.size));
    }
  for (const std::string& flag : host_compile_flags()) h.update_field(flag);
  h.update_field(compiler.identity);
  h.update_field(kEmulatedArch);
  return h.hex_digest();
}

int host_compile_count() { return g_host_compiles.load(); }
int emulator_runtime_compile_count() { return g_runtime_compiles.load(); }

namespace {

constexpr const char* kRuntimeUri = "cpgen_emulator_runtime";

// The emulator's run time is most of an emulated kernel's compile time (its standard headers and
// the fibers, collectives and sanitizer): compiled once per (emulator, flags, compiler) into an
// object, kept in the store and in this process, and linked into each kernel's shared object.
std::vector<std::string> runtime_object_flags() {
  std::vector<std::string> flags;
  for (const std::string& f : host_compile_flags()) flags.push_back(f == "-shared" ? "-c" : f);
  return flags;
}

std::string runtime_store_key(const HostCompiler& compiler) {
  return emulated_store_key("cpgen emulator runtime object 1\n" + emulator_runtime_source() + [] {
    std::string flags;
    for (const std::string& f : runtime_object_flags()) flags += f + " ";
    return flags;
  }(), compiler);
}

struct HostCompileOutput {
  std::string bytes;  // the file the compiler wrote
  std::string log;
};

// Runs the host compiler (argv) in `dir`, its output going to `output` and its log to `log_name`.
// A failure, or an exit 0 that wrote nothing, is one error naming `what`, the command and the log;
// the folder then stays for the user to read and rerun (a successful compile's is removed by the
// caller).
HostCompileOutput run_host_compile(const std::string& what, const HostCompiler& compiler, const fs::path& dir,
                                   const std::vector<std::string>& argv, const fs::path& output,
                                   const std::string& log_name) {
  const int status = run_logged(argv, dir / log_name);
  HostCompileOutput result;
  result.log = read_text(dir / log_name);
  if (status == 0) result.bytes = read_text(output);
  if (status == 0 && !result.bytes.empty()) return result;
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
  const std::string outcome = status < 0    ? "could not start " + compiler.path
                              : status != 0 ? "exit status " + std::to_string(status)
                                            : "exit status 0 but no " + output.filename().string() + " written";
  throw Error(ErrorKind::kCompile, "the host compiler could not build " + what + " (" + outcome + "): " +
                                       log_summary(result.log) + "; source kept in " + dir.string() +
                                       "; the whole log in " + (dir / log_name).string() + "; command: " + command);
}

// The run-time object's bytes: from this process, the store, or compiled in `dir` (whose include
// folder holds the emulator) and put in the store. `uri`: the kernel it is for, for messages.
std::string emulator_runtime_object(KernelStore* store, const HostCompiler& compiler, const fs::path& dir,
                                    const std::string& uri) {
  static std::mutex mutex;
  static std::map<std::string, std::string> objects;  // by store key
  const std::string key = runtime_store_key(compiler);
  std::lock_guard<std::mutex> lock(mutex);  // threads needing it wait for one compile
  if (auto it = objects.find(key); it != objects.end()) return it->second;
  if (store) {
    std::optional<CompiledKernel> stored = store->get(key);
    if (stored && stored->uri == kRuntimeUri && stored->arch == kEmulatedArch && !stored->cubin.empty())
      return objects[key] = stored->cubin;
  }
  const std::string source = emulator_runtime_source();
  write_text(dir / "runtime.cpp", source.data(), source.size());
  std::vector<std::string> argv = {compiler.path};
  for (const std::string& flag : runtime_object_flags()) argv.push_back(flag);
  for (const std::string& a : std::vector<std::string>{"-I", (dir / "include").string(), (dir / "runtime.cpp").string(),
                                                       "-o", (dir / "runtime.o").string()})
    argv.push_back(a);
  ++g_runtime_compiles;
  HostCompileOutput compiled = run_host_compile("the emulator run time for emulated kernel " + uri, compiler, dir, argv,
                                                dir / "runtime.o", "runtime.log");
  CompiledKernel object;
  object.uri = kRuntimeUri;
  object.arch = kEmulatedArch;
  object.key = key;
  object.cubin = std::move(compiled.bytes);
  object.log = std::move(compiled.log);
  object.stats.cubin_bytes = static_cast<int>(object.cubin.size());
  keep_in_store(store, object);
  return objects[key] = object.cubin;
}

}  // namespace

CompiledKernel compile_emulated(const KernelSpec& spec, KernelStore* store) {
  return compile_emulated(spec, store, host_compiler());
}

CompiledKernel compile_emulated(const KernelSpec& spec, KernelStore* store, const HostCompiler& compiler) {
  const auto start = std::chrono::steady_clock::now();
  auto ms_since_start = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  const std::string uri = spec.uri();
  const std::string source = emulated_source(spec);
  const std::string key = emulated_store_key(source, compiler);
  if (store) {
    std::optional<CompiledKernel> stored = store->get(key);
    if (stored && stored->uri == uri && stored->arch == kEmulatedArch) {
      stored->stats.compile_ms = ms_since_start();
      return *stored;
    }
  }

  // The templates and the emulator under the names the source includes them by.
  const fs::path dir = make_work_dir(uri);
  // A folder whose files could not all be written (a full disk) is removed: only a failed host
  // compile (kCompile) keeps its folder, for the source its message names (a half-written one
  // filled the disk's last bytes and stayed).
  std::string runtime;
  try {
    for (const auto files : {template_files(), embedded_emulation()})
      for (const EmbeddedTemplate& t : files) write_text(dir / "include" / t.name, t.contents, t.size);
    write_text(dir / "kernel.cpp", source.data(), source.size());
    runtime = emulator_runtime_object(store, compiler, dir, uri);
    write_text(dir / "runtime.o", runtime.data(), runtime.size());
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kIo) {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
    throw;
  }
  std::vector<std::string> argv = {compiler.path};
  for (const std::string& flag : host_compile_flags()) argv.push_back(flag);
  for (const std::string& a : std::vector<std::string>{"-I", (dir / "include").string(), (dir / "kernel.cpp").string(),
                                                       (dir / "runtime.o").string(), "-o", (dir / "kernel.so").string()})
    argv.push_back(a);
  ++g_host_compiles;
  HostCompileOutput compiled =
      run_host_compile("emulated kernel " + uri, compiler, dir, argv, dir / "kernel.so", "compile.log");
  CompiledKernel kernel;
  kernel.uri = uri;
  kernel.arch = kEmulatedArch;
  kernel.key = key;
  kernel.cubin = std::move(compiled.bytes);
  kernel.log = std::move(compiled.log);
  kernel.stats.cubin_bytes = static_cast<int>(kernel.cubin.size());
  kernel.stats.compile_ms = ms_since_start();
  std::error_code ec;
  fs::remove_all(dir, ec);
  keep_in_store(store, kernel);
  return kernel;
}

}  // namespace cpgen
