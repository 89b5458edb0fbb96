// The ptxas report parser, on log text captured from NVRTC 13.0 (--ptxas-options=--verbose).
#include <gtest/gtest.h>

#include "runtime/jit/ptxas_log.h"

namespace cpgen {
namespace {

// sm_90, one kernel with a local array (stack, no spills) and static shared memory.
constexpr const char* kStackLog =
    "ptxas info    : 4 bytes gmem\n"
    "ptxas info    : Compiling entry function 'kern' for 'sm_90'\n"
    "ptxas info    : Function properties for kern\n"
    "ptxas         .     256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 18 registers, used 1 barriers, 256 bytes cumulative stack size, 1024 bytes smem\n"
    "ptxas info    : Compile time = 9.256 ms\n";

// sm_80, two kernels, --maxrregcount=24 forcing spills in one; sm_80 also reports cmem[0].
constexpr const char* kSpillLog =
    "ptxas info    : Overriding maximum register limit 256 for 'other' with  24 of maxrregcount option\n"
    "ptxas info    : Overriding maximum register limit 256 for 'spilly' with  24 of maxrregcount option\n"
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function 'other' for 'sm_80'\n"
    "ptxas info    : Function properties for other\n"
    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]\n"
    "ptxas info    : Compile time = 1.470 ms\n"
    "ptxas info    : Compiling entry function 'spilly' for 'sm_80'\n"
    "ptxas info    : Function properties for spilly\n"
    "ptxas         .     5984 bytes stack frame, 5972 bytes spill stores, 12180 bytes spill loads\n"
    "ptxas info    : Used 24 registers, used 1 barriers, 5984 bytes cumulative stack size, 364 bytes cmem[0]\n"
    "ptxas info    : Compile time = 499.634 ms\n";

TEST(PtxasLog, ReadsRegistersStackAndSharedOfOneKernel) {
  auto k = kernel_resources(kStackLog, "kern");
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->registers, 18);
  EXPECT_EQ(k->stack_bytes, 256);
  EXPECT_EQ(k->spill_bytes, 0);
  EXPECT_EQ(k->shared_bytes, 1024);
}

TEST(PtxasLog, AttributesSpillsToTheRightKernel) {
  auto functions = parse_ptxas_log(kSpillLog);
  ASSERT_EQ(functions.size(), 2u);
  const FunctionResources& spilly = functions.at("spilly");
  EXPECT_TRUE(spilly.is_entry);
  EXPECT_EQ(spilly.registers, 24);
  EXPECT_EQ(spilly.spill_store_bytes, 5972);
  EXPECT_EQ(spilly.spill_load_bytes, 12180);
  EXPECT_EQ(spilly.stack_frame_bytes, 5984);
  EXPECT_EQ(spilly.const_bytes, 364);
  EXPECT_EQ(spilly.shared_bytes, 0);

  auto other = kernel_resources(kSpillLog, "other");
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->registers, 8);
  EXPECT_EQ(other->spill_bytes, 0);  // the other kernel's spills are not its own

  auto spills = kernel_resources(kSpillLog, "spilly");
  ASSERT_TRUE(spills.has_value());
  EXPECT_EQ(spills->spill_bytes, 5972 + 12180);
}

TEST(PtxasLog, CountsSpillsOfDeviceFunctionsThatWereNotInlined) {
  // A noinline device function reports properties but no "Used" line; its spills happen on
  // behalf of the kernel that calls it.
  constexpr const char* kLog =
      "ptxas info    : Function properties for _Z6helperPf\n"
      "ptxas         .     48 bytes stack frame, 16 bytes spill stores, 16 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'ring_fwd_x' for 'sm_90a'\n"
      "ptxas info    : Function properties for ring_fwd_x\n"
      "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 8 bytes cumulative stack size\n";
  auto k = kernel_resources(kLog, "ring_fwd_x");
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->registers, 255);
  EXPECT_EQ(k->spill_bytes, 4 + 4 + 16 + 16);
  EXPECT_EQ(k->stack_bytes, 8);
  EXPECT_EQ(k->shared_bytes, 0);
}

TEST(PtxasLog, MissingKernelOrMissingReportIsNullopt) {
  EXPECT_FALSE(kernel_resources(kStackLog, "not_there").has_value());
  EXPECT_FALSE(kernel_resources("", "kern").has_value());
  // A compiler diagnostic log (no ptxas lines) reports nothing.
  EXPECT_FALSE(kernel_resources("p(1): error: identifier \"x\" is undefined\n", "kern").has_value());
  EXPECT_TRUE(parse_ptxas_log("1 error detected in the compilation of \"p\".\n").empty());
}

TEST(PtxasLog, ToleratesCarriageReturnsAndNoTrailingNewline) {
  std::string log = kStackLog;
  std::string crlf;
  for (char c : log) {
    if (c == '\n') crlf += '\r';
    crlf += c;
  }
  crlf.pop_back();  // drop the last '\n'
  auto k = kernel_resources(crlf, "kern");
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->registers, 18);
  EXPECT_EQ(k->shared_bytes, 1024);
}

}  // namespace
}  // namespace cpgen
