// A fresh `git clone` of this commit, with nothing beside it, has everything the build and the
// tests read: CMake configures it, and this test binary, pointed at the clone's files
// (CPGEN_TEST_SOURCE_DIR), runs the data-reading tests there using only the in-repo vector set.
// The whole thing (clone, build, install, run the suite) is tools/check-clone.sh; it takes
// 7-14 minutes on two cores, so the suite runs this part only: 3 s on an idle two-core
// machine, 11 s on a busy one, most of it the CMake configure. It clones the committed HEAD:
// a data file the tests read counts once it is committed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

namespace fs = std::filesystem;

using Shell = testing::ShellResult;
constexpr auto shell = testing::run_shell;

std::string quoted(const std::string& s) { return "'" + s + "'"; }

TEST(Clone, FreshCloneConfiguresAndHasEveryFileTheTestsRead) {
  testing::TempDir dir("clone");
  const std::string log = dir.path() + "/log.txt";
  const std::string source = CPGEN_SOURCE_DIR;
  Shell head = shell("git -C " + quoted(source) + " rev-parse HEAD", log);
  if (head.code != 0) GTEST_SKIP() << source << " is not a git checkout (or git is missing): " << head.output;
  const std::string commit = head.output.substr(0, head.output.find('\n'));
  const auto started = std::chrono::steady_clock::now();

  // The clone sits alone in an empty folder: no ../shared beside it.
  const std::string clone = dir.path() + "/cpgen";
  Shell cloned = shell("git clone -q --no-checkout " + quoted(source) + " " + quoted(clone) + " && git -C " +
                           quoted(clone) + " checkout -q " + commit,
                       log);
  ASSERT_EQ(cloned.code, 0) << cloned.output;
  EXPECT_FALSE(fs::exists(dir.path() + "/shared"));

  const char* cmake_env = std::getenv("CPGEN_CMAKE");
  const std::string cmake = cmake_env && *cmake_env ? cmake_env : "cmake";
  // Where this machine's dependencies are not installed but carried (the GPU machines:
  // tools/gpu-check.sh), CPGEN_CMAKE_ARGS holds the configure's hints to them, shell-quoted.
  const char* hints = std::getenv("CPGEN_CMAKE_ARGS");
  Shell configure = shell(cmake + " -S " + quoted(clone) + " -B " + quoted(clone + "/build") + " " +
                              (hints ? hints : ""),
                          log);
  EXPECT_EQ(configure.code, 0) << "configuring the clone failed:\n" << configure.output;

  // This binary, reading the clone's data files: the vector sets, the generator check, the
  // reference and partition checks, and `cpgen verify` on an in-repo file.
  const std::string filter =
      "VectorSets.*:MakeVectors.*:*ReferenceVectors.*:Reference.ShardOfQueriesGivesTheSameRows:"
      "Partition.*:*CpuRingVectors.*repo_mqa*_zigzag:CmdVerify.PassesOnEveryTensorAndReportsJson";
  Shell tests = shell("env -u CPGEN_VECTORS_DIR CPGEN_TEST_SOURCE_DIR=" + quoted(clone) + " /proc/" +
                          std::to_string(::getpid()) + "/exe --gtest_filter=" + quoted(filter),
                      log);
  EXPECT_EQ(tests.code, 0) << tests.output;
  const std::string sets_line = "reference vector sets: repo=" + clone + "/tests/data/vectors\n";
  EXPECT_NE(tests.output.find(sets_line), std::string::npos)
      << "the clone must run on its own vector set and no other:\n" << tests.output;
  std::printf("  clone, configure and data tests took %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

}  // namespace
}  // namespace cpgen
