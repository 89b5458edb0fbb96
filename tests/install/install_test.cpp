// `cmake --install` into a temporary prefix, then build examples/link-demo against it with
// find_package(cpgen) the way a user project would, and run both demo programs (C ABI in C, C++
// API). Needs no GPU; about 10-20 s on two cores (one CMake configure of a two-file project).
// Then a relocated install: the prefix is moved after installing and must still find the caches
// under its own share/cpgen/caches (a second or two). tools/check-clone.sh does the full version:
// build from a clone, install, delete the clone and its build, run the installed cpgen.
#include <gtest/gtest.h>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cpgen/ring_attention.h"
#include "temp_dir.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;

using Shell = cpgen::testing::ShellResult;
Shell shell(const std::string& command, const fs::path& log) { return cpgen::testing::run_shell(command, log.string()); }

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// Expects the RUNPATH (or RPATH) of the ELF file at `path` to hold only absolute folders and
// $ORIGIN-relative ones: an empty entry is the process's current directory, where the loader would
// look for libnvrtc, libsqlite3 and the rest first (readelf -d prints "Library runpath: [a:b:]").
void expect_no_relative_runpath(const fs::path& path, const fs::path& log) {
  Shell r = shell("readelf -d " + quoted(path), log);
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* tag : {"Library runpath: [", "Library rpath: ["}) {
    const size_t at = r.output.find(tag);
    if (at == std::string::npos) continue;
    const size_t begin = at + std::string(tag).size();
    const std::string list = r.output.substr(begin, r.output.find(']', begin) - begin);
    size_t start = 0;
    while (true) {
      const size_t colon = list.find(':', start);
      const std::string entry = list.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      EXPECT_TRUE(entry.rfind("/", 0) == 0 || entry.rfind("$ORIGIN", 0) == 0)
          << path << ": RUNPATH entry '" << entry << "' in [" << list << "] is relative to the current directory";
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
}

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

  // Neither the built nor the installed library and command line look for libraries in the
  // current directory.
  for (const fs::path& elf : {fs::path(CPGEN_BINARY_DIR) / "libcpgen.so", fs::path(CPGEN_BINARY_DIR) / "cpgen",
                              prefix / "bin/cpgen"})
    expect_no_relative_runpath(elf, log);
  for (const auto& entry : fs::recursive_directory_iterator(prefix))
    if (entry.path().filename() == "libcpgen.so") expect_no_relative_runpath(entry.path(), log);

  // The package defines none of cpgen's build macros in its consumers (CPGEN_HAVE_NCCL was
  // exported as an interface definition of cpgen::cpgen).
  for (const auto& entry : fs::recursive_directory_iterator(prefix))
    if (entry.path().extension() == ".cmake") {
      std::ifstream in(entry.path());
      const std::string text(std::istreambuf_iterator<char>(in), {});
      EXPECT_EQ(text.find("CPGEN_HAVE_"), std::string::npos) << entry.path();
    }
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
  // Zigzag over 8 ranks: rank 7 holds chunks 7 and 8 of each document (100000: 6250 + 6250; 1: 0;
  // 31071 = 16 * 1941 + 15: 1942 + 1942).
  EXPECT_NE(c.output.find("c_packed_rows_rank7=16384"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("c_bad_layout=bad input"), std::string::npos) << c.output;

  if (!::testing::Test::HasFailure()) fs::remove_all(root);
}

// A program built with libstdc++'s old string ABI would link against the C++ API and misread
// every std::string and std::vector field of a Problem (a reviewer's link demo: "q_heads must be
// an integer 1..1024, got 131072"): every C++ API header refuses it at compile time
// (cpgen/cxx_abi.h), naming the C header to use instead; with the C++11 ABI each compiles.
TEST(Install, TheCppApiRefusesTheOldStringAbiAtCompileTime) {
  cpgen::testing::TempDir dir("old_abi");
  const char* env_cxx = std::getenv("CXX");
  const std::string cxx = env_cxx && *env_cxx ? env_cxx : "c++";
  const std::string compile = cxx + " -std=c++20 -fsyntax-only -I " + quoted(fs::path(CPGEN_SOURCE_DIR) / "include") + " ";
  for (const char* header : {"problem.h", "ring_attention.h", "nccl_bootstrap.h", "error.h"}) {
    SCOPED_TRACE(header);
    const fs::path source = fs::path(dir.path()) / (std::string(header) + ".cpp");
    std::ofstream(source) << "#include \"cpgen/" << header << "\"\nint main() { return 0; }\n";
    Shell old_abi = shell(compile + "-D_GLIBCXX_USE_CXX11_ABI=0 " + quoted(source), fs::path(dir.path()) / "old.log");
    EXPECT_NE(old_abi.code, 0) << old_abi.output;
    EXPECT_NE(old_abi.output.find("include cpgen/cpgen_c.h instead"), std::string::npos) << old_abi.output;
    Shell new_abi = shell(compile + quoted(source), fs::path(dir.path()) / "new.log");
    EXPECT_EQ(new_abi.code, 0) << new_abi.output;
  }
}

// The library exports cpgen's own names only (cmake/libcpgen.map): the C ABI, the C++ API and the
// namespace's internals; before, about 800 of its 1450 dynamic symbols were nlohmann's and the
// standard library's template code, which a program with another version of them would bind.
TEST(Install, TheLibraryExportsCpgensNamesOnly) {
  const fs::path log = fs::temp_directory_path() / ("cpgen_exports_" + std::to_string(::getpid()) + ".log");
  Shell r = shell("nm -D --defined-only -C " + quoted(fs::path(CPGEN_BINARY_DIR) / "libcpgen.so"), log);
  fs::remove(log);
  ASSERT_EQ(r.code, 0) << r.output;
  int symbols = 0, c_api = 0;
  size_t start = 0;
  while (start < r.output.size()) {
    const size_t end = std::min(r.output.find('\n', start), r.output.size());
    const std::string line = r.output.substr(start, end - start);
    start = end + 1;
    // "<address> <type> <name>"; the version node's own entry has no name of cpgen's.
    const size_t name_at = line.find(' ', line.find(' ') + 1);
    if (name_at == std::string::npos) continue;
    const std::string name = line.substr(name_at + 1);
    if (name.empty() || line.find(" A ") != std::string::npos) continue;
    ++symbols;
    if (name.rfind("cpgen_", 0) == 0) ++c_api;
    const bool own = name.rfind("cpgen::", 0) == 0 || name.rfind("cpgen_", 0) == 0 ||
                     name.find(" for cpgen::") != std::string::npos || name.find(" to cpgen::") != std::string::npos;
    EXPECT_TRUE(own) << "exported: " << name;
  }
  EXPECT_GT(symbols, 100);
  EXPECT_GE(c_api, 25) << "the C ABI's functions";
}

// The installed cpgen finds its shipped caches from where its library lies, not from a path fixed
// at configure time, and an installed copy never reads the source tree's caches/.
TEST(Install, MovedPrefixStillSelectsItsOwnCaches) {
  const char* cmake_env = std::getenv("CPGEN_CMAKE");
  const std::string cmake = cmake_env && *cmake_env ? cmake_env : "cmake";
  fs::path root = fs::temp_directory_path() / ("cpgen_moved_prefix_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const fs::path log = root / "log.txt";
  Shell install = shell(cmake + " --install " + quoted(CPGEN_BINARY_DIR) + " --prefix " + quoted(root / "first"), log);
  ASSERT_EQ(install.code, 0) << "cmake --install failed:\n" << install.output;
  const fs::path prefix = root / "moved";
  fs::rename(root / "first", prefix);

  // A site cache whose one pattern entry names a non-default tile; its name sorts before the
  // shipped default-heuristic.json, so its entry is the first pattern that matches.
  const fs::path caches = prefix / "share/cpgen/caches";
  ASSERT_TRUE(fs::is_directory(caches)) << "the install has no " << caches;
  const std::string kernel = "ring_fwd_bf16_hd128_causal_gqa4_bm64_bn64_w4_s2";
  const fs::path site = caches / "00-site.json";
  const nlohmann::json pattern = nlohmann::json::object(
      {{"dtype", "bf16"}, {"head_dim", 128}, {"causal", true}, {"gqa_group", 4}});
  const nlohmann::json entry = nlohmann::json::object(
      {{"kernel", kernel}, {"source", "default-heuristic"}, {"disposition", "not-timed"}, {"workload", pattern}});
  std::ofstream(site) << nlohmann::json::object(
                             {{"format", "cpgen-tuning-cache"}, {"version", 1}, {"entries", nlohmann::json::array({entry})}})
                             .dump(2);

  const std::string shape =
      R"('{"name": "s", "batch": 1, "q_heads": 8, "kv_heads": 2, "head_dim": 128, "seq_len": 8192, )"
      R"("cp_size": 2, "dtype": "bf16", "causal": true}')";
  Shell explain = shell("env -u CPGEN_CACHES_DIR " + quoted(prefix / "bin/cpgen") + " explain --json --arch sm_90 --db " +
                            quoted(root / "absent.db") + " --shape " + shape + " 2>/dev/null",
                        log);
  ASSERT_EQ(explain.code, 0) << explain.output;
  const nlohmann::json doc = nlohmann::json::parse(explain.output);
  ASSERT_FALSE(doc.at("cache_dirs").empty()) << explain.output;
  EXPECT_EQ(fs::path(doc["cache_dirs"][0].at("path").get<std::string>()), caches) << explain.output;
  EXPECT_TRUE(doc["cache_dirs"][0].at("exists").get<bool>());
  for (const auto& d : doc["cache_dirs"])
    EXPECT_NE(fs::path(d.at("path").get<std::string>()), fs::path(CPGEN_SOURCE_DIR) / "caches")
        << "an installed cpgen must not read the source tree's caches";
  int from_site = 0;
  for (const auto& step : doc.at("shapes").at(0).at("steps")) {
    if (step.at("origin") != site.string()) continue;
    EXPECT_EQ(step.at("kernel"), kernel);
    EXPECT_EQ(step.at("source"), "pretuned-pattern");
    ++from_site;
  }
  EXPECT_GT(from_site, 0) << "no step selected the moved prefix's cache:\n" << explain.output;
  if (!::testing::Test::HasFailure()) fs::remove_all(root);
}

}  // namespace
