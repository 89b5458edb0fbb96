// Telling infeasible configs (traits static_assert) from real compile errors, on NVRTC 13.0 logs.
#include <gtest/gtest.h>

#include "runtime/jit/compile_log.h"

namespace cpgen {
namespace {

// Captured from NVRTC 13.0: a static_assert in a header named cpgen/traits.cuh.
constexpr const char* kTraitsAssert =
    "cpgen/traits.cuh(2): error: static assertion failed with \"needs 5 bytes of shared memory; allows 4\"\n"
    "  template <int N> struct Traits { static_assert(N < 4, \"needs 5 bytes of shared memory; allows 4\"); };\n"
    "                                   ^\n"
    "          detected during instantiation of class \"Traits<N> [with N=7]\" at line 2 of ring_x\n"
    "\n"
    "1 error detected in the compilation of \"ring_x\".\n";

TEST(CompileLog, TraitsStaticAssertIsInfeasibleWithItsMessage) {
  auto reason = traits_assertion_failure(kTraitsAssert);
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, "needs 5 bytes of shared memory; allows 4");
}

TEST(CompileLog, SeveralTraitsAssertsAreJoinedOnce) {
  std::string log = std::string(kTraitsAssert) +
                    "cpgen/traits.cuh(9): error: static assertion failed with \"1 to 4 pipeline stages\"\n" +
                    "cpgen/traits.cuh(2): error: static assertion failed with \"needs 5 bytes of shared memory; allows 4\"\n";
  EXPECT_EQ(traits_assertion_failure(log).value_or("none"),
            "needs 5 bytes of shared memory; allows 4; 1 to 4 pipeline stages");
}

TEST(CompileLog, AnyOtherErrorIsACompileFailure) {
  // Real syntax or name errors are bugs, even next to an assertion.
  EXPECT_FALSE(traits_assertion_failure(
      "ring_x(1): error: identifier \"undefined_thing\" is undefined\n1 error detected in the compilation of \"ring_x\".\n"));
  EXPECT_FALSE(traits_assertion_failure(std::string(kTraitsAssert) +
                                        "cpgen/mma.cuh(40): error: expected a \";\"\n"));
  // A static_assert outside the traits header is a template bug, not a resource limit.
  EXPECT_FALSE(traits_assertion_failure(
      "cpgen/step_fwd.cuh(12): error: static assertion failed with \"layout mismatch\"\n"));
  // No error at all (a log of warnings, or ptxas info) is not an assertion failure.
  EXPECT_FALSE(traits_assertion_failure("ptxas info    : Used 18 registers\n"));
  EXPECT_FALSE(traits_assertion_failure(""));
}

// A compile failure's message carries one line of its log: the first error, printable, with how
// much more the saved log holds.
TEST(CompileLog, TheSummaryIsTheFirstErrorOnOneLine) {
  EXPECT_EQ(log_summary("ring_x.cu(3): warning: unused\n\nring_x.cu(7): error: identifier \"f\" is undefined\n"
                        "  f();\n  ^\n1 error detected\n"),
            "ring_x.cu(7): error: identifier \\\"f\\\" is undefined (the log has 4 more lines)");
  EXPECT_EQ(log_summary("  broken on purpose\n"), "broken on purpose");
  EXPECT_EQ(log_summary("\n \n"), "the log is empty");
  // A warning that names something with "error" in it is no error line.
  EXPECT_EQ(log_summary("x.cu(1): warning: unused variable \"error_count\"\nx.cu(2): error: boom\n"),
            "x.cu(2): error: boom (the log has 1 more lines)");
  const std::string summary = log_summary(std::string(5000, 'x') + " error: \n\x01\xff\n");
  EXPECT_LE(summary.size(), 340u) << summary;
  EXPECT_EQ(summary.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace cpgen
