#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "cpgen/error.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/ring/partition.h"

namespace cpgen::testing {

namespace {

bool is_directory(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_directory(dir, ec);
}

bool same_folder(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec);
}

}  // namespace

const std::vector<VectorSet>& vector_sets() {
  static const std::vector<VectorSet> sets = [] {
    std::vector<VectorSet> found{{"repo", vectors_dir()}};
    std::vector<VectorSet> optional;
    if (const char* env = std::getenv("CPGEN_VECTORS_DIR"); env && *env) optional.push_back({"env", env});
    optional.push_back({"shared", (std::filesystem::path(source_dir()) / ".." / "shared" / "vectors")
                                      .lexically_normal()
                                      .string()});
    for (const VectorSet& set : optional) {
      if (!is_directory(set.dir)) continue;
      bool duplicate = false;
      for (const VectorSet& have : found) duplicate = duplicate || same_folder(have.dir, set.dir);
      if (!duplicate) found.push_back(set);
    }
    std::string line = "cpgen tests: reference vector sets:";
    for (const VectorSet& set : found) line += " " + set.name + "=" + set.dir;
    std::fprintf(stderr, "%s\n", line.c_str());
    return found;
  }();
  return sets;
}

std::string source_dir() {
  const char* env = std::getenv("CPGEN_TEST_SOURCE_DIR");
  return env && *env ? env : CPGEN_SOURCE_DIR;
}

std::string vectors_dir() { return source_dir() + "/tests/data/vectors"; }

std::vector<std::string> vector_files() {
  std::vector<std::string> files;
  for (const VectorSet& set : vector_sets()) {
    std::error_code ec;
    std::vector<std::string> in_set;
    for (std::filesystem::directory_iterator it(set.dir, ec), end; !ec && it != end; it.increment(ec)) {
      const auto& p = it->path();
      if (p.extension() == ".json" && p.filename() != "partitions.json") in_set.push_back(p.string());
    }
    std::sort(in_set.begin(), in_set.end());
    files.insert(files.end(), in_set.begin(), in_set.end());
  }
  return files;
}

std::vector<std::string> vector_files_v2() {
  std::vector<std::string> files;
  for (const VectorSet& set : vector_sets()) {
    std::error_code ec;
    std::vector<std::string> in_set;
    for (std::filesystem::directory_iterator it(set.dir + "/v2", ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".json") in_set.push_back(it->path().string());
    std::sort(in_set.begin(), in_set.end());
    files.insert(files.end(), in_set.begin(), in_set.end());
  }
  return files;
}

std::vector<std::string> partition_files() {
  std::vector<std::string> files;
  for (const VectorSet& set : vector_sets()) {
    const std::string file = set.dir + "/partitions.json";
    std::error_code ec;
    if (set.name == "repo" || std::filesystem::is_regular_file(file, ec)) files.push_back(file);
  }
  return files;
}

std::string vector_case_name(const std::string& path) {
  std::string set_name = "other";
  for (const VectorSet& set : vector_sets())
    if (same_folder(std::filesystem::path(path).parent_path().string(), set.dir) ||
        same_folder(std::filesystem::path(path).parent_path().string(), set.dir + "/v2"))
      set_name = set.name;
  std::string name = set_name + "_" + std::filesystem::path(path).stem().string();
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

namespace {
// Where run_cli captures output: one folder per process, made by mkdtemp. A name of the pid alone
// collided with a stale folder left by an earlier process of the same pid and another owner
// (pids wrap at 32768; a test child switched to nobody could not write into root's folder).
// The folder is removed when the process that made it exits (each ctest test is a process of its
// own; a folder per test left behind would fill the temporary directory run after run).
pid_t g_cli_dir_owner = 0;
std::string g_cli_dir;

std::filesystem::path cli_output_dir() {
  if (g_cli_dir_owner != ::getpid()) {  // first call, or a forked child
    std::string pattern =
        (std::filesystem::temp_directory_path() / ("cpgen_cli_" + std::to_string(::getpid()) + "_XXXXXX")).string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("run_cli: cannot create a folder like " + pattern);
    static const bool registered = std::atexit(remove_cli_output_dir) == 0;
    (void)registered;
    g_cli_dir_owner = ::getpid();
    g_cli_dir = pattern;
  }
  return g_cli_dir;
}
}  // namespace

void remove_cli_output_dir() {
  std::error_code ec;
  if (g_cli_dir_owner == ::getpid()) std::filesystem::remove_all(g_cli_dir, ec);
}

ShellResult run_shell(const std::string& command, const std::string& log) {
  const int status = std::system(("(" + command + ") >'" + log + "' 2>&1 </dev/null").c_str());
  ShellResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  r.output = slurp(log);
  return r;
}

CliResult run_cli(const std::string& args) {
  static int counter = 0;
  const std::filesystem::path dir = cli_output_dir();
  std::string base = (dir / std::to_string(counter++)).string();
  std::string cmd = std::string(CPGEN_CLI_PATH) + " " + args + " >" + base + ".out 2>" + base + ".err </dev/null";
  int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  std::filesystem::remove(base + ".out");
  std::filesystem::remove(base + ".err");
  return r;
}

bool partitionable(Scheme scheme, int64_t seq_len, int cp_size) {
  try {
    check_partitionable(scheme, seq_len, cp_size);
    return true;
  } catch (const Error&) {
    return false;
  }
}

bool have_gpu(std::string* why) {
  return cu::try_driver(why) != nullptr;
}

bool full_compile_matrix() {
  const char* env = std::getenv("CPGEN_FULL_COMPILE_MATRIX");
  return env && std::string(env) == "1";
}

std::string find_cuda_tool(const std::string& name) {
  namespace fs = std::filesystem;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && fs::exists(dir + "/" + name)) return dir + "/" + name;
  if (const fs::path tool = fs::path(CPGEN_CUDA_BIN_DIR) / name; fs::exists(tool)) return tool.string();  // the build's toolkit
  std::error_code ec;
  const fs::path fetched = fs::path(CPGEN_BINARY_DIR) / "cuda-tools";
  for (auto it = fs::recursive_directory_iterator(fetched, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file() && it->path().filename() == name) return it->path().string();
  return "";
}

std::string disassemble_cubin(const std::string& cubin_path, std::string* skip_reason) {
  const std::string cuobjdump = find_cuda_tool("cuobjdump"), nvdisasm = find_cuda_tool("nvdisasm");
  if (cuobjdump.empty() || nvdisasm.empty()) {
    *skip_reason = std::string("no cuobjdump/nvdisasm on PATH, in the CUDA install or in ") + CPGEN_BINARY_DIR +
                   "/cuda-tools: pip install --target " + CPGEN_BINARY_DIR +
                   "/cuda-tools nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm (tools/setup.sh does)";
    return "";
  }
  const std::string sass = cubin_path + ".sass";
  // cuobjdump hands sm_90a code to nvdisasm, found through NVDISASM_PATH.
  const std::string command = "NVDISASM_PATH='" + std::filesystem::path(nvdisasm).parent_path().string() + "' '" +
                              cuobjdump + "' -sass '" + cubin_path + "' > '" + sass + "' 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream in(sass);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (status != 0) throw std::runtime_error("cuobjdump -sass " + cubin_path + " failed: " + text);
  return text;
}

}  // namespace cpgen::testing
