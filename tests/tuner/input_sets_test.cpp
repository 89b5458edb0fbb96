#include <gtest/gtest.h>

#include <string>

#include "cpgen/error.h"
#include "tuner/input_sets.h"

namespace cpgen::testing {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(InputSets, EnoughSetsToSpanFourTimesTheL2) {
  // H100/H200: 50 MiB of L2, 140 GiB free. A 30 MiB set needs ceil(200 / 30) = 7 sets.
  EXPECT_EQ(input_set_count(50 * kMiB, 140 * 1024 * kMiB, 30 * kMiB, "x"), 7u);
  // Exactly four L2s in two sets: two.
  EXPECT_EQ(input_set_count(50 * kMiB, 140 * 1024 * kMiB, 100 * kMiB, "x"), 2u);
  // One byte more per set still needs only two (ceil(200 / 100.000001) = 2).
  EXPECT_EQ(input_set_count(50 * kMiB, 140 * 1024 * kMiB, 100 * kMiB + 1, "x"), 2u);
  // 199 MiB spans 4 x 50 MiB in two sets.
  EXPECT_EQ(input_set_count(50 * kMiB, 140 * 1024 * kMiB, 199 * kMiB, "x"), 2u);
}

TEST(InputSets, AtLeastTwoAtMostTheCap) {
  // A set larger than four L2s still rotates through two, so no launch reuses the last one's.
  EXPECT_EQ(input_set_count(50 * kMiB, 140 * 1024 * kMiB, 2048 * kMiB, "x"), 2u);
  // A small set gets its 200 copies, which together span four L2s: with eight (the old cap) all
  // of them fit in the L2 at once and every launch found its inputs there.
  EXPECT_EQ(input_set_count(50 * kMiB, 140 * 1024 * kMiB, 1 * kMiB, "x"), 200u);
  EXPECT_EQ(input_set_count(50 * kMiB, 140 * 1024 * kMiB, 5 * kMiB, "x") * 5 * kMiB >= 200 * kMiB, true);
  // Sets of under 0.8 MiB stop at the cap.
  EXPECT_EQ(input_set_count(50 * kMiB, 140 * 1024 * kMiB, kMiB / 4, "x"), kMaxInputSets);
}

TEST(InputSets, NeverMoreThanHalfTheFreeMemory) {
  // 1 GiB sets with 5 GiB free: two would fit half the free memory (2.5 GiB), not three.
  EXPECT_EQ(input_set_count(50 * kMiB, 5 * 1024 * kMiB, 1024 * kMiB, "x"), 2u);
  // With 3 GiB free only one 1 GiB set fits half of it: the timer reuses that one.
  EXPECT_EQ(input_set_count(50 * kMiB, 3 * 1024 * kMiB, 1024 * kMiB, "x"), 1u);
}

TEST(InputSets, ASetOverHalfTheFreeMemoryIsOneLineNamingIt) {
  try {
    input_set_count(50 * kMiB, 3 * 1024 * kMiB, 2048 * kMiB, "input set of bf16 hd128");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCuda);
    const std::string what = e.what();
    EXPECT_NE(what.find("one input set of bf16 hd128 needs 2048 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find("3072 MiB free"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace cpgen::testing
