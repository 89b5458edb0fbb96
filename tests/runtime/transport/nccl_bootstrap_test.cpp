// NCCL bootstrap through a shared file, the parts that need no GPU: a rank that waits for a file
// that never comes, a file for another job (stale), a file for another ring size, a file that is
// not ours. Communicator creation itself is covered by the NcclRing GPU tests.
#include "cpgen/nccl_bootstrap.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "cpgen/error.h"
#include "tests/temp_dir.h"

namespace cpgen {
namespace {

#ifdef CPGEN_HAVE_NCCL

std::string hex_id() { return std::string(2 * kNcclUniqueIdBytes, 'a'); }

// Rank `rank` of an `nranks` ring whose id file is <dir>/id.
NcclFileBootstrap options_in(const testing::TempDir& dir, int rank, int nranks) {
  NcclFileBootstrap o;
  o.path = dir.path() + "/id";
  o.rank = rank;
  o.nranks = nranks;
  return o;
}

Error bootstrap_error(const NcclFileBootstrap& o) {
  try {
    nccl_comm_from_file(o);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "nccl_comm_from_file returned without an error";
  return Error(ErrorKind::kInternal, "");
}

TEST(NcclBootstrap, RankWaitingForAMissingFileTimesOutNamingRankAndPath) {
  testing::TempDir dir("nccl_boot");
  NcclFileBootstrap o = options_in(dir, 2, 4);
  o.timeout_seconds = 0.3;
  const auto start = std::chrono::steady_clock::now();
  Error e = bootstrap_error(o);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(e.kind(), ErrorKind::kNccl);
  EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find(o.path), std::string::npos) << e.what();
  EXPECT_GE(took, 0.3);
  EXPECT_LT(took, 5.0);
}

// A timeout of 0 or less gave up at once, and NaN or 1e300 waited forever (a ctypes caller cannot
// interrupt the wait): each is refused first; a day is the most.
TEST(NcclBootstrap, ATimeoutMustBeFiniteAndPositive) {
  testing::TempDir dir("nccl_boot");
  for (const double timeout : {0.0, -1.0, std::nan(""), HUGE_VAL, 1e300, 86400.5}) {
    NcclFileBootstrap o = options_in(dir, 1, 2);
    o.timeout_seconds = timeout;
    const Error e = bootstrap_error(o);
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
    EXPECT_NE(std::string(e.what()).find("timeout_seconds"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("allowed: seconds > 0 and at most 86400 (a day)"), std::string::npos) << e.what();
  }
}

TEST(NcclBootstrap, StaleFileOfAnotherJobIsNeverUsed) {
  testing::TempDir dir("nccl_boot");
  NcclFileBootstrap o = options_in(dir, 1, 2);
  o.timeout_seconds = 0.3;
  o.job_key = "job-42";
  std::ofstream(o.path) << "cpgen-nccl-id/1\n2\njob-41\n" << hex_id() << "\n";
  Error e = bootstrap_error(o);
  EXPECT_EQ(e.kind(), ErrorKind::kNccl);
  EXPECT_NE(std::string(e.what()).find("job key 'job-42'"), std::string::npos) << e.what();
}

TEST(NcclBootstrap, FileForAnotherRingSizeIsRejected) {
  testing::TempDir dir("nccl_boot");
  NcclFileBootstrap o = options_in(dir, 1, 4);
  o.timeout_seconds = 5;
  std::ofstream(o.path) << "cpgen-nccl-id/1\n8\n-\n" << hex_id() << "\n";
  Error e = bootstrap_error(o);
  EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
  EXPECT_NE(std::string(e.what()).find("written for 8 ranks"), std::string::npos) << e.what();
}

TEST(NcclBootstrap, ForeignFileIsRejected) {
  testing::TempDir dir("nccl_boot");
  NcclFileBootstrap o = options_in(dir, 1, 2);
  std::ofstream(o.path) << "hello\n";
  Error e = bootstrap_error(o);
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(std::string(e.what()).find("not a cpgen NCCL id file"), std::string::npos) << e.what();
}

TEST(NcclBootstrap, BadRankIsBadInput) {
  NcclFileBootstrap o;
  o.path = "/tmp/unused";
  o.rank = 3;
  o.nranks = 2;
  Error e = bootstrap_error(o);
  EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
  EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
}

TEST(NcclBootstrap, ANegativeDeviceIsBadInputAndWritesNoFile) {
  testing::TempDir dir("nccl_boot");
  NcclFileBootstrap o = options_in(dir, 0, 2);
  o.device = -1;
  Error e = bootstrap_error(o);
  EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
  EXPECT_NE(std::string(e.what()).find("device -1"), std::string::npos) << e.what();
  EXPECT_FALSE(std::filesystem::exists(o.path));
}

// Rank 0 writes the id file before its communicator init; an init that fails (here on a device
// no machine has: with or without a GPU, or NCCL unable to load before the file) leaves no file
// for a later job's ranks to join. Before the fix the file stayed, and a rank 1 without a job
// key took it at once.
TEST(NcclBootstrap, ARankZeroWhoseInitFailsLeavesNoIdFile) {
  testing::TempDir dir("nccl_boot");
  NcclFileBootstrap o = options_in(dir, 0, 2);
  o.device = 1000;
  bootstrap_error(o);
  EXPECT_FALSE(std::filesystem::exists(o.path));
}

#else

TEST(NcclBootstrap, WithoutNcclEveryEntryPointSaysSo) {
  EXPECT_FALSE(nccl_available());
  try {
    nccl_comm_from_file({});
    FAIL() << "no error without NCCL";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNccl);
    EXPECT_NE(std::string(e.what()).find("built without NCCL"), std::string::npos);
  }
}

#endif

}  // namespace
}  // namespace cpgen
