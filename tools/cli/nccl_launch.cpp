#include "tools/cli/nccl_launch.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cpgen/error.h"
#include "runtime/core/user_cache_dir.h"
#include "runtime/cuda/cuda_driver.h"

extern char** environ;

namespace cpgen::cli {
namespace {

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

}  // namespace

std::vector<nlohmann::json> launch_nccl_ranks(int nranks, const std::vector<std::string>& task_args,
                                              int timeout_seconds) {
  namespace fs = std::filesystem;
  const std::string tmp = temp_dir();
  std::string pattern = (fs::path(tmp) / "cpgen_nccl_XXXXXX").string();
  if (!::mkdtemp(pattern.data()))
    throw Error(ErrorKind::kIo, "cannot create a folder under " + tmp + ": " + std::strerror(errno));
  const fs::path dir = pattern;
  std::vector<pid_t> pids(nranks, -1);
  const bool shared_gpu = cu::device_count() < nranks;
  for (int r = 0; r < nranks; ++r) {
    std::vector<std::string> args = {"/proc/self/exe", "_nccl-rank"};
    args.insert(args.end(), task_args.begin(), task_args.end());
    for (const std::string& a : {std::string("--rank"), std::to_string(r), std::string("--nranks"),
                                 std::to_string(nranks), std::string("--id-file"), (dir / "id").string(),
                                 std::string("--result"), (dir / ("rank" + std::to_string(r) + ".json")).string()})
      args.push_back(a);
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    // Ranks sharing a GPU: distinct host ids make NCCL accept them (it refuses two ranks on one
    // device of one host), and such "hosts" talk over sockets on the loopback interface, which
    // always exists. With a GPU per rank NCCL picks its fast paths itself.
    if (shared_gpu && !std::getenv("NCCL_HOSTID"))
      env.push_back("NCCL_HOSTID=cpgen-rank-" + std::to_string(r));
    if (shared_gpu && !std::getenv("NCCL_SOCKET_IFNAME")) env.push_back("NCCL_SOCKET_IFNAME=lo");
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string err = (dir / ("rank" + std::to_string(r) + ".err")).string();
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    const int rc = posix_spawn(&pids[r], "/proc/self/exe", &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      for (int k = 0; k < r; ++k) kill(pids[k], SIGKILL);
      throw Error(ErrorKind::kIo, "could not start NCCL rank " + std::to_string(r) + ": posix_spawn error " +
                                      std::to_string(rc));
    }
  }
  std::vector<int> codes(nranks, -1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  int left = nranks;
  bool timed_out = false;
  while (left > 0) {
    for (int r = 0; r < nranks; ++r) {
      if (codes[r] != -1) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      timed_out = true;
      for (int r = 0; r < nranks; ++r)
        if (codes[r] == -1) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          codes[r] = 128 + SIGKILL;
          --left;
        }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<nlohmann::json> results(nranks);
  std::string failure;
  for (int r = 0; r < nranks && failure.empty(); ++r) {
    const fs::path result = dir / ("rank" + std::to_string(r) + ".json");
    std::ifstream in(result);
    if (codes[r] == 0 && in) {
      results[r] = nlohmann::json::parse(in, nullptr, false);
      if (!results[r].is_discarded()) continue;
    }
    const std::string why = last_line((dir / ("rank" + std::to_string(r) + ".err")).string());
    failure = "NCCL rank " + std::to_string(r) + (timed_out && codes[r] == 128 + SIGKILL
                                                      ? " did not finish within " + std::to_string(timeout_seconds) + " s"
                                                      : " exited with status " + std::to_string(codes[r])) +
              (why.empty() ? "" : ": " + why);
  }
  fs::remove_all(dir);
  if (!failure.empty()) throw Error(ErrorKind::kNccl, failure);
  return results;
}

}  // namespace cpgen::cli
