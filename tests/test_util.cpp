#include "test_util.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "runtime/cuda/cuda_driver.h"

namespace cpgen::testing {

std::string vectors_dir() {
  const char* env = std::getenv("CPGEN_VECTORS_DIR");
  return env && *env ? env : CPGEN_VECTORS_DIR;
}

std::vector<std::string> vector_files() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(vectors_dir())) {
    const auto& p = entry.path();
    if (p.extension() == ".json" && p.filename() != "partitions.json") files.push_back(p.string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

static std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

CliResult run_cli(const std::string& args) {
  static int counter = 0;
  auto dir = std::filesystem::temp_directory_path() / ("cpgen_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
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

bool have_gpu(std::string* why) {
  return cu::try_driver(why) != nullptr;
}

}  // namespace cpgen::testing
