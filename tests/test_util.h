// Helpers shared by the test suite: paths, reference vectors, running the command line.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cpgen/problem.h"
#include "cpgen/types.h"

namespace cpgen::testing {

// A ring problem for the tests: bf16, head dim 64, the given scheme, lengths, mask and heads.
inline Problem ring_problem(Scheme scheme, int64_t seq_len, int64_t cp_size, bool causal, int64_t q_heads = 4,
                            int64_t kv_heads = 2, int64_t batch = 2) {
  Problem p;
  p.batch = batch;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.head_dim = 64;
  p.seq_len = seq_len;
  p.cp_size = cp_size;
  p.causal = causal;
  p.scheme = scheme;
  return p;
}

// Whether `scheme` splits seq_len rows over cp_size ranks (check_partitionable without the throw).
bool partitionable(Scheme scheme, int64_t seq_len, int cp_size);

// The whole file at `path`, bytes as they are ("" when it cannot be read).
std::string slurp(const std::string& path);

// Float64 vectors as the float inputs the rings take.
inline std::vector<float> as_float(const std::vector<double>& x) { return {x.begin(), x.end()}; }

// The source tree the tests read data from: $CPGEN_TEST_SOURCE_DIR when set (the clone check runs
// this binary against a fresh clone's files), else the tree this binary was built from.
std::string source_dir();

// Float64 reference vectors (docs/formats.md). The project's own set, tests/data/vectors (written
// by tools/vectors/make_vectors.py), is required and always used. Independent sets are added
// when present: $CPGEN_VECTORS_DIR, and ../shared/vectors beside the source tree. A missing
// optional folder is never an error.
struct VectorSet {
  std::string name;  // "repo", "env" or "shared": the prefix of parameterized test names
  std::string dir;
};
// The sets in use, in the order above, each folder once. The first call prints them on stderr.
const std::vector<VectorSet>& vector_sets();
// The in-repo set's folder. Tests that need one particular case take it from here.
std::string vectors_dir();
// Every format-1 attention case (*.json except partitions.json, top level only; format 2 lives in
// a v2/ subfolder and is not read here) of every set, sorted by set then name. Never throws: an
// unreadable folder contributes nothing, and VectorSets.InRepoSetIsComplete fails instead.
std::vector<std::string> vector_files();
// Every format-2 case (v2/*.json) of every set, sorted by set then name: the in-repo v2 folder
// (the generator writes it) and an optional set's where it has one.
std::vector<std::string> vector_files_v2();
// partitions.json of every set: the in-repo one always (a test reading it fails if it is
// missing), an optional set's only where it has one.
std::vector<std::string> partition_files();
// A test-name-safe label for a vectors file: "<set>_<file stem>", e.g. repo_mha_causal_hd64_s64.
std::string vector_case_name(const std::string& path);
nlohmann::json load_json(const std::string& path);

// CPGEN_FULL_COMPILE_MATRIX=1 (tools/gpu-check.sh --full-matrix sets it): the compile tests compile every
// default instead of CI's subset.
bool full_compile_matrix();

// A CUDA tool (cuobjdump, nvdisasm) on PATH, in the bin folder of the CUDA toolkit the build
// found, or under the build folder's cuda-tools (tools/setup.sh fetches them from PyPI when the
// install lacks them); "" if none.
std::string find_cuda_tool(const std::string& name);
// The SASS text of a cubin file by `cuobjdump -sass` (nvdisasm found as above). Sets *skip_reason
// and returns "" when the tools are missing; throws std::runtime_error when cuobjdump fails.
std::string disassemble_cubin(const std::string& cubin_path, std::string* skip_reason);

// The lines of `text` as its newlines: a command's one-line error is "...\n".
inline int line_count(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs build/cpgen with the given argument string (shell words) and captures its output.
CliResult run_cli(const std::string& args);

struct ShellResult {
  int code = -1;       // exit status; 128 when the shell did not exit normally
  std::string output;  // stdout and stderr together
};
// Runs `command` with /bin/sh, stdin from /dev/null, stdout and stderr into the file `log`
// (kept, for a failing test's message), and returns the status and that output.
ShellResult run_shell(const std::string& command, const std::string& log);
// Removes this process's capture folder of run_cli. Done at exit; a forked child that leaves by
// _exit calls it first.
void remove_cli_output_dir();

// Sets environment variables for one scope (a child run_cli starts inherits them) and puts the
// old values back when the scope ends, the latest change undone first; a null value unsets.
class ScopedEnv {
 public:
  ScopedEnv() = default;
  ScopedEnv(const char* name, const char* value) { set(name, value); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
    if (value) ::setenv(name, value, 1); else ::unsetenv(name);
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it)
      if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1); else ::unsetenv(it->first.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// The environment of an NCCL rank process in the tests, which runs ranks on one GPU as separate
// hosts (distinct NCCL_HOSTID values): sockets over loopback only (the GPU machine's other
// interfaces reach nothing), no InfiniBand, shared memory or peer-to-peer paths.
inline const std::vector<std::pair<const char*, const char*>>& nccl_rank_test_env() {
  static const std::vector<std::pair<const char*, const char*>> env = {
      {"NCCL_SOCKET_IFNAME", "lo"}, {"NCCL_IB_DISABLE", "1"}, {"NCCL_SHM_DISABLE", "1"}, {"NCCL_P2P_DISABLE", "1"}};
  return env;
}

// True where a CUDA device is usable; otherwise prints why and the test should GTEST_SKIP.
bool have_gpu(std::string* why = nullptr);

}  // namespace cpgen::testing

#define CPGEN_REQUIRE_GPU()                                                          \
  do {                                                                               \
    std::string cpgen_why_;                                                          \
    if (!::cpgen::testing::have_gpu(&cpgen_why_))                                    \
      GTEST_SKIP() << "GPU test skipped: " << cpgen_why_;                            \
  } while (0)
