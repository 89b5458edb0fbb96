// cpgen/nccl_mpi.h through tests/nccl_probe/mpi_probe.cpp, three ranks on a stand-in MPI whose
// ranks are threads. With an NCCL that cannot load, rank 0 cannot make the unique id: every rank
// must return with an error (rank 0's own, the others naming rank 0's), none may wait in the
// broadcast. Before, rank 0 threw before MPI_Bcast and ranks 1 and 2 waited there for good.
#include <gtest/gtest.h>

#include <string>

#include "tests/temp_dir.h"
#include "tests/test_util.h"

namespace cpgen {
namespace {

TEST(NcclMpi, ARankZeroWithoutAnIdFailsEveryRankInsteadOfHangingThem) {
  testing::TempDir dir("nccl_mpi");
  const testing::ShellResult r = testing::run_shell(
      "CPGEN_NCCL_LIBRARY=" + dir.path() + "/absent/libnccl.so.2 timeout 60 '" CPGEN_MPI_PROBE_PATH "'",
      dir.path() + "/log");
  ASSERT_EQ(r.code, 0) << "the probe did not return (124: a rank waited in MPI_Bcast): " << r.output;
  EXPECT_NE(r.output.find("rank 0: error: "), std::string::npos) << r.output;
  for (const char* other : {"rank 1: error: nccl_comm_from_mpi: rank 0 could not make the NCCL unique id: ",
                            "rank 2: error: nccl_comm_from_mpi: rank 0 could not make the NCCL unique id: "})
    EXPECT_NE(r.output.find(other), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(": ok"), std::string::npos) << r.output;
}

// With an NCCL that loads, rank 0's id reaches the other ranks: every rank gets as far as its own
// ncclCommInitRank, which fails here for want of a GPU, and none reports rank 0's failure.
TEST(NcclMpi, RankZerosIdReachesEveryRank) {
#ifndef CPGEN_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL: no id to make";
#else
  testing::TempDir dir("nccl_mpi_ok");
  const testing::ShellResult r = testing::run_shell("timeout 60 '" CPGEN_MPI_PROBE_PATH "'", dir.path() + "/log");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* rank : {"rank 0: ", "rank 1: ", "rank 2: "}) EXPECT_NE(r.output.find(rank), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank 0 could not make"), std::string::npos) << r.output;
#endif
}

}  // namespace
}  // namespace cpgen
