// Helpers shared by the test suite: paths, reference vectors, running the command line.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace cpgen::testing {

// ../shared/vectors, or $CPGEN_VECTORS_DIR.
std::string vectors_dir();
// Every *.json attention case in vectors_dir() except partitions.json, sorted by name.
std::vector<std::string> vector_files();
nlohmann::json load_json(const std::string& path);

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs build/cpgen with the given argument string (shell words) and captures its output.
CliResult run_cli(const std::string& args);

// True where a CUDA device is usable; otherwise prints why and the test should GTEST_SKIP.
bool have_gpu(std::string* why = nullptr);

}  // namespace cpgen::testing

#define CPGEN_REQUIRE_GPU()                                                          \
  do {                                                                               \
    std::string cpgen_why_;                                                          \
    if (!::cpgen::testing::have_gpu(&cpgen_why_))                                    \
      GTEST_SKIP() << "GPU test skipped: " << cpgen_why_;                            \
  } while (0)
