// The emulator's global float reductions (emulation/cuda_emulation.h) against the PTX ISA's
// definition, stated here on its own: red.global.add.f32 adds with round-to-nearest-even and
// flushes subnormal inputs and results to zero of the same sign; red.global.add.v2.f32 (sm_90)
// does that to each of two adjacent words, each atomically on its own, at an 8-byte aligned
// address. The backward kernel's dQ goes through these (templates/atomic.cuh).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "float_bits.h"
// Last: defines __CUDACC__ and the CUDA keywords.
#include "emulation/cuda_emulation.h"
#include "finding_test_util.h"
// The templates' wrapper, which picks the vector form under the emulator (it emulates sm_90).
#include "cpgen/atomic.cuh"

namespace cpgen {
namespace {

using testing::expect_finding;

using testing::bits;  // so that -0.0f is told from +0.0f

struct Case {
  float old_value, addend, want;
  const char* what;
};

// Written from the rule, not from the emulator: each expectation is worked out by hand.
const Case kCases[] = {
    {1.0f, std::ldexp(1.0f, -24), 1.0f, "a tie rounds to the even mantissa (down)"},
    {1.0f + std::ldexp(1.0f, -23), std::ldexp(1.0f, -24), 1.0f + std::ldexp(1.0f, -22), "a tie rounds to the even mantissa (up)"},
    {1.0f, std::ldexp(1.0f, -24) + std::ldexp(1.0f, -40), 1.0f + std::ldexp(1.0f, -23), "above a tie rounds up"},
    {0.0f, std::numeric_limits<float>::denorm_min(), 0.0f, "a subnormal addend counts as zero"},
    {-std::numeric_limits<float>::denorm_min(), -0.0f, -0.0f, "a subnormal old value flushes to zero of its sign"},
    {std::ldexp(1.5f, -126), -std::ldexp(1.25f, -126), 0.0f, "a subnormal sum flushes to zero of its sign"},
    {-std::ldexp(1.5f, -126), std::ldexp(1.25f, -126), -0.0f, "a negative subnormal sum flushes to -0"},
    {std::ldexp(1.0f, -126), std::ldexp(1.0f, -126), std::ldexp(1.0f, -125), "normal sums stay exact"},
};

TEST(Reduction, ScalarAddRoundsToNearestEvenAndFlushesSubnormals) {
  for (const Case& c : kCases) {
    static float word;
    word = c.old_value;
    static float addend;
    addend = c.addend;
    ASSERT_EQ(emulation::launch(1, 1, 32, 0, [] {
                if (threadIdx.x == 0) emulation::red_add_f32(&word, addend);
              }),
              "");
    EXPECT_EQ(bits(word), bits(c.want)) << c.what << ": got " << word << ", want " << c.want;
  }
}

TEST(Reduction, VectorPairAddsEachWordWithTheScalarRule) {
  for (const Case& c : kCases) {
    // Each case in the first word, and reversed in the second (old value and addend swapped: the
    // same sum), so both halves are checked against the rule.
    alignas(8) static float pair[2];
    pair[0] = c.old_value;
    pair[1] = c.addend;
    static float x, y;
    x = c.addend;
    y = c.old_value;
    ASSERT_EQ(emulation::launch(1, 1, 32, 0, [] {
                if (threadIdx.x == 0) device::red_add_f32x2(pair, x, y);
              }),
              "");
    EXPECT_EQ(bits(pair[0]), bits(c.want)) << c.what << " (word 0): got " << pair[0];
    EXPECT_EQ(bits(pair[1]), bits(c.want)) << c.what << " (word 1): got " << pair[1];
  }
}

TEST(Reduction, ConcurrentVectorPairsLoseNoAddition) {
  // 4 blocks of 256 threads add (1, 2) to one pair: integers, exact in fp32.
  alignas(8) static float pair[2];
  pair[0] = pair[1] = 0.0f;
  ASSERT_EQ(emulation::launch(4, 1, 256, 0, [] { device::red_add_f32x2(pair, 1.0f, 2.0f); }), "");
  EXPECT_EQ(pair[0], 1024.0f);
  EXPECT_EQ(pair[1], 2048.0f);
}

TEST(Reduction, VectorPairIsAtomicPerWordOnly) {
  // The ISA promises atomicity per word, not for the pair: another thread may see the first word
  // updated and the second not yet. The emulator lets that happen, so a kernel that read the pair
  // as one update would be seen to misbehave; here some thread must observe a torn pair.
  alignas(8) static float pair[2];
  static int torn;
  pair[0] = pair[1] = 0.0f;
  torn = 0;
  ASSERT_EQ(emulation::launch(1, 1, 64, 0, [] {
              device::red_add_f32x2(pair, 1.0f, 1.0f);
              if (pair[0] != pair[1]) ++torn;
            }),
            "");
  EXPECT_GT(torn, 0);
  EXPECT_EQ(pair[0], 64.0f);
  EXPECT_EQ(pair[1], 64.0f);
}

TEST(Reduction, VectorPairOffItsAlignmentOrOutsideTheBuffersIsCaught) {
  alignas(16) static float sums[8];
  // The launch may write the first 7 floats.
  testing::LaunchBuffers buffers({{sums, 7 * sizeof(float)}});
  // 4-byte aligned is enough for the scalar form, not for the pair.
  expect_finding(emulation::launch(1, 1, 32, 0, [] {
                   if (threadIdx.x == 1) device::red_add_f32x2(&sums[1], 1.0f, 1.0f);
                 }),
                 {"thread 1 of block (0, 0, 0)", "red.add.v2 writes to global address 0x", "not aligned to 8 bytes"});
  // An aligned pair whose second word, sums[7], is past the buffer.
  expect_finding(emulation::launch(1, 1, 32, 0, [] {
                   if (threadIdx.x == 2) device::red_add_f32x2(&sums[6], 1.0f, 1.0f);
                 }),
                 {"thread 2 of block (0, 0, 0)", "red.add.v2 writes global bytes"});
  // The reported operations did not happen; an aligned pair inside is clean.
  for (float s : sums) EXPECT_EQ(s, 0.0f);
  EXPECT_EQ(emulation::launch(1, 1, 32, 0, [] {
              if (threadIdx.x == 2) device::red_add_f32x2(&sums[4], 1.0f, 2.0f);
            }),
            "");
  EXPECT_EQ(sums[4], 1.0f);
  EXPECT_EQ(sums[5], 2.0f);
}

// red.global.min.u64 (the tuner's comparison kernels keep their first disagreeing index with it):
// the smaller as unsigned 64-bit integers, so a value with the top bit set is the larger, never a
// negative; an equal or larger value leaves the word alone.
TEST(Reduction, UnsignedMinKeepsTheSmallerInTheUnsignedOrder) {
  struct MinCase {
    uint64_t old_value, value, want;
    const char* what;
  };
  const MinCase cases[] = {
      {100, 7, 7, "a smaller value replaces"},
      {7, 100, 7, "a larger value leaves it"},
      {7, 7, 7, "an equal value leaves it"},
      {1, uint64_t{1} << 63, 1, "the top bit set is large, not negative"},
      {uint64_t{1} << 63, 1, 1, "below a top-bit value"},
      {~uint64_t{0}, ~uint64_t{0} - 1, ~uint64_t{0} - 1, "at the top of the range"},
      {uint64_t{5} << 32, (uint64_t{4} << 32) | 0xffffffffu, (uint64_t{4} << 32) | 0xffffffffu,
       "the high word decides before the low"},
  };
  for (const MinCase& c : cases) {
    alignas(8) static uint64_t word;
    word = c.old_value;
    static uint64_t value;
    value = c.value;
    ASSERT_EQ(emulation::launch(1, 1, 32, 0, [] {
                if (threadIdx.x == 3) emulation::red_min_u64(&word, value);
              }),
              "");
    EXPECT_EQ(word, c.want) << c.what;
  }
  // Every thread of two CTAs reduces its own value: the minimum of all stays.
  alignas(8) static uint64_t word;
  word = 1000000;
  ASSERT_EQ(emulation::launch(2, 1, 64, 0, [] {
              emulation::red_min_u64(&word, 5000 + 37 * ((threadIdx.x * 11 + blockIdx.x * 5) % 64));
            }),
            "");
  EXPECT_EQ(word, 5000u);
}

TEST(Reduction, UnsignedMinOffItsAlignmentOutsideTheBuffersOrOnUnwrittenMemoryIsCaught) {
  alignas(16) static uint64_t words[4];
  testing::LaunchBuffers buffers({{words, 3 * sizeof(uint64_t)}});
  words[0] = words[1] = words[2] = words[3] = 50;
  expect_finding(emulation::launch(1, 1, 32, 0, [] {
                   if (threadIdx.x == 1) emulation::red_min_u64(reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(words) + 4), 1);
                 }),
                 {"thread 1 of block (0, 0, 0)", "red.min", "not aligned to 8 bytes"});
  expect_finding(emulation::launch(1, 1, 32, 0, [] {
                   if (threadIdx.x == 2) emulation::red_min_u64(&words[3], 1);
                 }),
                 {"thread 2 of block (0, 0, 0)", "red.min writes global bytes", "outside every buffer"});
  for (uint64_t w : words) EXPECT_EQ(w, 50u) << "a reported reduction does not happen";

  // A poisoned buffer whose word nothing wrote: compute-sanitizer initcheck's uninitialized read.
  alignas(8) static uint64_t fresh[2];
  fresh[0] = ~uint64_t{0};
  fresh[1] = 9;
  testing::LaunchBuffers poisoned({{fresh, sizeof fresh, nullptr, true}});
  expect_finding(emulation::launch(1, 1, 32, 0, [] {
                   if (threadIdx.x == 0) emulation::red_min_u64(&fresh[0], 1);
                 }),
                 {"red.min compares with", "nothing wrote them"});
  EXPECT_EQ(emulation::launch(1, 1, 32, 0, [] {
              if (threadIdx.x == 0) emulation::red_min_u64(&fresh[1], 4);
            }),
            "");
  EXPECT_EQ(fresh[1], 4u);
}

}  // namespace
}  // namespace cpgen
