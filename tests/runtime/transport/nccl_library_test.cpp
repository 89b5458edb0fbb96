// Which NCCL cpgen runs on (runtime/transport/nccl_library.h). libcpgen does not link NCCL; it
// loads one when an NCCL function first runs, and prefers the NCCL the process already has. The
// probe (tests/nccl_probe/) loads libcpgen into a fresh process as an FFI user does, optionally
// after a stand-in libnccl.so.2 that plays a framework's NCCL; none of this needs a GPU.
#include "cpgen/nccl_bootstrap.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "cpgen/error.h"
#include "tests/temp_dir.h"
#include "tests/test_util.h"

#ifdef CPGEN_HAVE_NCCL
#include <nccl.h>

#include "runtime/transport/nccl_library.h"
#endif

namespace cpgen {
namespace {

#ifdef CPGEN_HAVE_NCCL

// The probe's key=value lines.
std::map<std::string, std::string> probe(const std::string& prefix, const std::string& nccl = "") {
  testing::TempDir dir("nccl_probe");
  const std::string command = prefix + " '" CPGEN_NCCL_PROBE_PATH "' '" CPGEN_LIBRARY_PATH "'" +
                              (nccl.empty() ? "" : " '" + nccl + "'");
  const testing::ShellResult r = testing::run_shell(command, dir.path() + "/log");
  EXPECT_EQ(r.code, 0) << command << "\n" << r.output;
  std::map<std::string, std::string> lines;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) lines[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return lines;
}

std::string canonical(const std::string& path) { return std::filesystem::canonical(path).string(); }

TEST(NcclLibrary, LoadingLibcpgenLoadsNoNcclAndTheFirstNcclCallLoadsOne) {
  auto r = probe("env -u CPGEN_NCCL_LIBRARY");
  EXPECT_EQ(r["nccl_after_load"], "0") << "libcpgen pulled in an NCCL as it loaded";
  ASSERT_EQ(r["status"], "0") << r["error"];
  EXPECT_GE(std::stoi(r["version"]), nccl::kMinNcclVersion);
  ASSERT_FALSE(r["path"].empty());
  EXPECT_TRUE(std::filesystem::exists(r["path"])) << r["path"];
  EXPECT_EQ(r["nccl_after_query"], "1");
}

TEST(NcclLibrary, UsesTheNcclTheProcessAlreadyLoaded) {
  auto r = probe("env -u CPGEN_NCCL_LIBRARY", CPGEN_NCCL_STUB_NEW_PATH);
  EXPECT_EQ(r["nccl_after_load"], "1");
  ASSERT_EQ(r["status"], "0") << r["error"];
  EXPECT_EQ(r["version"], "29901");
  EXPECT_EQ(canonical(r["path"]), canonical(CPGEN_NCCL_STUB_NEW_PATH));
  EXPECT_EQ(r["nccl_after_query"], "1") << "a second NCCL was loaded beside the process's own";
}

TEST(NcclLibrary, RefusesAnNcclOlderThanItNeedsInOneLine) {
  auto r = probe("env -u CPGEN_NCCL_LIBRARY", CPGEN_NCCL_STUB_OLD_PATH);
  EXPECT_EQ(r["status"], "5");  // CPGEN_ERR_NCCL
  const std::string& e = r["error"];
  EXPECT_NE(e.find("version 2.17.6"), std::string::npos) << e;
  EXPECT_NE(e.find("2.18.0 or newer"), std::string::npos) << e;
  EXPECT_NE(e.find("nccl_stub_old"), std::string::npos) << "the message names the file: " << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(NcclLibrary, CpgenNcclLibraryChoosesTheFile) {
  auto r = probe("env CPGEN_NCCL_LIBRARY='" CPGEN_NCCL_STUB_NEW_PATH "'");
  EXPECT_EQ(r["nccl_after_load"], "0");
  ASSERT_EQ(r["status"], "0") << r["error"];
  EXPECT_EQ(r["version"], "29901");
  EXPECT_EQ(canonical(r["path"]), canonical(CPGEN_NCCL_STUB_NEW_PATH));
}

TEST(NcclLibrary, CpgenNcclLibraryThatDoesNotLoadIsNamed) {
  auto r = probe("env CPGEN_NCCL_LIBRARY=/nonexistent/libnccl.so.2");
  EXPECT_EQ(r["status"], "5");
  EXPECT_NE(r["error"].find("CPGEN_NCCL_LIBRARY=/nonexistent/libnccl.so.2 could not be loaded"),
            std::string::npos)
      << r["error"];
  EXPECT_EQ(r["nccl_after_query"], "0");
}

// This test binary links NCCL itself, so cpgen must take that one, not a second copy.
TEST(NcclLibrary, InAProcessLinkedWithNcclItIsThatOne) {
  if (const char* chosen = std::getenv("CPGEN_NCCL_LIBRARY"); chosen && *chosen)
    GTEST_SKIP() << "CPGEN_NCCL_LIBRARY is set";
  int linked = 0;
  ASSERT_EQ(ncclGetVersion(&linked), ncclSuccess);
  const NcclLibrary library = nccl_library();
  EXPECT_EQ(library.version, linked);
  EXPECT_EQ(nccl::api().ncclGetVersion, &ncclGetVersion) << "cpgen resolved another NCCL's functions";
}

TEST(NcclLibrary, VersionTextReadsBothEncodings) {
  EXPECT_EQ(nccl::version_text(22809), "2.28.9");
  EXPECT_EQ(nccl::version_text(21800), "2.18.0");
  EXPECT_EQ(nccl::version_text(2708), "2.7.8");  // before 2.9: major * 1000 + minor * 100 + patch
}

#else

TEST(NcclLibrary, WithoutNcclBuiltInItSaysSo) {
  try {
    nccl_library();
    FAIL() << "nccl_library returned in a build without NCCL";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNccl);
    EXPECT_NE(std::string(e.what()).find("built without NCCL"), std::string::npos) << e.what();
  }
}

#endif  // CPGEN_HAVE_NCCL

}  // namespace
}  // namespace cpgen
