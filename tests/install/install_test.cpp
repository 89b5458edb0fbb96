// `cmake --install` into a temporary prefix, then build examples/link-demo against it with
// find_package(cpgen) the way a user project would, and run both demo programs (C ABI in C, C++
// API). Needs no GPU; about 10-20 s on two cores (one CMake configure of a two-file project).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cpgen/ring_attention.h"

namespace {

namespace fs = std::filesystem;

struct Shell {
  int code = -1;
  std::string output;
};

Shell shell(const std::string& command, const fs::path& log) {
  std::string full = "(" + command + ") >" + log.string() + " 2>&1 </dev/null";
  int status = std::system(full.c_str());
  std::ifstream in(log);
  Shell r;
  r.output.assign(std::istreambuf_iterator<char>(in), {});
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

TEST(Install, LinkDemoBuildsAgainstInstalledPackage) {
  const char* cmake_env = std::getenv("CPGEN_CMAKE");
  const std::string cmake = cmake_env && *cmake_env ? cmake_env : "cmake";
  fs::path root = fs::temp_directory_path() / ("cpgen_install_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const fs::path prefix = root / "prefix";
  const fs::path demo_build = root / "demo-build";
  const fs::path log = root / "log.txt";

  Shell install = shell(cmake + " --install " + quoted(CPGEN_BINARY_DIR) + " --prefix " +
                            quoted(prefix),
                        log);
  ASSERT_EQ(install.code, 0) << "cmake --install failed:\n" << install.output;
  EXPECT_TRUE(fs::exists(prefix / "include/cpgen/cpgen_c.h"));
  EXPECT_TRUE(fs::exists(prefix / "include/cpgen/ring_attention.h"));
  bool have_config = fs::exists(prefix / "lib/cmake/cpgen/cpgenConfig.cmake") ||
                     fs::exists(prefix / "lib64/cmake/cpgen/cpgenConfig.cmake") ||
                     fs::exists(prefix / "lib/x86_64-linux-gnu/cmake/cpgen/cpgenConfig.cmake");
  EXPECT_TRUE(have_config) << "no cpgenConfig.cmake under " << prefix;

  // The installed public headers must not pull in CUDA or NCCL.
  for (const auto& entry : fs::directory_iterator(prefix / "include/cpgen")) {
    std::ifstream in(entry.path());
    std::string text(std::istreambuf_iterator<char>(in), {});
    EXPECT_EQ(text.find("#include <cuda"), std::string::npos) << entry.path();
    EXPECT_EQ(text.find("#include <nccl"), std::string::npos) << entry.path();
    EXPECT_EQ(text.find("#include \"runtime/"), std::string::npos) << entry.path();
  }

  Shell configure = shell(cmake + " -S " + quoted(fs::path(CPGEN_SOURCE_DIR) / "examples/link-demo") +
                              " -B " + quoted(demo_build) + " -DCMAKE_PREFIX_PATH=" +
                              quoted(prefix) + " -DCMAKE_BUILD_TYPE=Release",
                          log);
  ASSERT_EQ(configure.code, 0) << "configuring the link demo failed:\n" << configure.output;
  Shell build = shell(cmake + " --build " + quoted(demo_build) + " -j2", log);
  ASSERT_EQ(build.code, 0) << "building the link demo failed:\n" << build.output;

  Shell cpp = shell(quoted(demo_build / "link_demo"), log);
  EXPECT_EQ(cpp.code, 0) << cpp.output;
  EXPECT_NE(cpp.output.find(std::string("cpgen_version=") + cpgen::version()), std::string::npos)
      << cpp.output;
  EXPECT_NE(cpp.output.find("valid=llama3-8b-128k-cp8 gqa=4 local_seq=16384"), std::string::npos)
      << cpp.output;
  EXPECT_NE(cpp.output.find("invalid=bad input"), std::string::npos) << cpp.output;

  Shell c = shell(quoted(demo_build / "link_demo_c"), log);
  EXPECT_EQ(c.code, 0) << c.output;
  EXPECT_NE(c.output.find("c_invalid=bad input"), std::string::npos) << c.output;

  if (!::testing::Test::HasFailure()) fs::remove_all(root);
}

}  // namespace
