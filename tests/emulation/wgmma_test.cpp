// The emulator's wgmma.mma_async m64nNk16 (f32 accumulators, bf16 and fp16 inputs) against a
// float64 matmul of the same inputs. The operands are placed in shared memory by an index
// function written here from the PTX ISA's "Shared Memory Matrix Layout" (swizzle atoms of 8 rows
// of the swizzle span, K-major or MN-major, LBO and SBO between atoms), and the accumulators are
// read back through the ISA's register figure for D (hopper_test_util.h). Every swizzle mode, both
// majors, A from shared memory and from registers, overwrite and accumulate, N from 8 to 256.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "hopper_test_util.h"

namespace cpgen {
namespace {

using emulation::float_from_16;
using emulation::float_to_16;

// One operand's layout: K-major or MN-major, swizzle span in bytes (0: none), and the two byte
// offsets between atoms the descriptor carries.
struct Layout {
  bool mn_major;
  uint32_t span;
  uint32_t lbo, sbo;
};

uint32_t descriptor_swizzle(uint32_t span) {
  return span == 128  ? emulation::kWgmmaSwizzle128B
         : span == 64 ? emulation::kWgmmaSwizzle64B
         : span == 32 ? emulation::kWgmmaSwizzle32B
                      : emulation::kWgmmaSwizzleNone;
}

// A layout of `extent` rows of MN (64 for A, N for B) with atoms packed one after another.
Layout make_layout(bool mn_major, uint32_t span, int extent) {
  if (!mn_major) {
    // K-major: an atom is 8 MN-rows of `span` bytes (16 without swizzle: a core matrix); the 16
    // K elements are 32 bytes of a swizzled row, or two core matrices LBO apart.
    if (span == 0) return {false, 0, 128, 256};
    return {false, span, 16, 8 * span};  // LBO unused for swizzled K-major
  }
  // MN-major: an atom is 8 K-rows of `span` bytes (span / 2 MN elements; 16 bytes unswizzled).
  const int per_row = span == 0 ? 8 : static_cast<int>(span / 2);
  const uint32_t atom = span == 0 ? 128 : 8 * span;
  const uint32_t mn_atoms = static_cast<uint32_t>((extent + per_row - 1) / per_row);
  if (span == 0) return {true, 0, mn_atoms * atom, atom};  // SBO: next 8 MN, LBO: next 8 K
  return {true, span, 2 * atom, atom};                     // LBO: next MN atom, SBO: next 8 K
}

// Byte offset from the operand's start of element (mn, k), the operand starting at a multiple of
// 1024 so that every swizzle pattern starts with it.
uint32_t canonical_offset(const Layout& l, int mn, int k) {
  if (!l.mn_major) {
    if (l.span == 0) return (mn / 8) * l.sbo + (k / 8) * l.lbo + (mn % 8) * 16 + (k % 8) * 2;
    return (mn / 8) * l.sbo + testing::swizzled((mn % 8) * l.span + 2 * k, l.span);
  }
  if (l.span == 0) return (mn / 8) * l.sbo + (k / 8) * l.lbo + (k % 8) * 16 + (mn % 8) * 2;
  const int per_row = static_cast<int>(l.span / 2);
  return (mn / per_row) * l.lbo + (k / 8) * l.sbo + testing::swizzled((k % 8) * l.span + 2 * (mn % per_row), l.span);
}

uint64_t device_descriptor(uint32_t start, const Layout& l) {
  return testing::isa_descriptor(start, l.lbo, l.sbo, descriptor_swizzle(l.span));
}

uint32_t round_up(uint32_t x, uint32_t to) { return (x + to - 1) / to * to; }

struct Case {
  bool bf16;
  int n;
  bool a_in_registers;
  Layout a, b;  // a unused when a_in_registers
  bool accumulate;
  int scale_a;
};

std::string describe(const Layout& l) {
  return std::string(l.mn_major ? "MN-major" : "K-major") +
         (l.span ? " " + std::to_string(l.span) + "B" : " unswizzled");
}

// The case's launch: operands at their places in shared memory, one wgmma, and each thread's
// registers before and after the wait.
struct Run {
  std::vector<float> early, late;  // [thread][register]
  std::string error;
};

Run run_case(const Case& c, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, float initial) {
  const int n = c.n;
  std::vector<uint16_t> image;
  uint32_t a_start = 0, b_start = 0;
  {
    uint32_t a_end = 0, b_end = 0;
    for (int m = 0; m < 64; ++m)
      for (int k = 0; k < 16; ++k) a_end = std::max(a_end, canonical_offset(c.a, m, k) + 2);
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < 16; ++k) b_end = std::max(b_end, canonical_offset(c.b, j, k) + 2);
    b_start = c.a_in_registers ? 0 : round_up(a_end, 1024);
    image.assign(round_up(b_start + b_end, 1024) / 2, 0);
    if (!c.a_in_registers)
      for (int m = 0; m < 64; ++m)
        for (int k = 0; k < 16; ++k) image[(a_start + canonical_offset(c.a, m, k)) / 2] = a[m * 16 + k];
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < 16; ++k) image[(b_start + canonical_offset(c.b, j, k)) / 2] = b[j * 16 + k];
  }
  static const Case* s_case;
  static const std::vector<uint16_t>* s_image;
  static const std::vector<uint16_t>* s_a;
  static uint64_t s_desc_a, s_desc_b;
  static float s_initial;
  static Run s_run;
  s_case = &c;
  s_image = &image;
  s_a = &a;
  s_initial = initial;
  s_desc_a = device_descriptor(a_start, c.a);
  s_desc_b = device_descriptor(b_start, c.b);
  s_run = Run{std::vector<float>(static_cast<size_t>(128 * n / 2)),
              std::vector<float>(static_cast<size_t>(128 * n / 2)), ""};
  s_run.error = emulation::launch(1, 1, 128, static_cast<int>(image.size() * 2), [] {
    const Case& k = *s_case;
    const int t = static_cast<int>(threadIdx.x), regs = k.n / 2;
    if (t == 0) memcpy(cpgen::device::shared_storage, s_image->data(), s_image->size() * 2);
    __syncthreads();
    float d[128];
    for (int i = 0; i < regs; ++i) d[i] = s_initial + static_cast<float>(i);
    // A's fragment of this thread (ISA figure for A of m64nNk16): rows g and g + 8 of its warp's
    // 16, columns 2t, 2t + 1 (registers 0, 1) and 2t + 8, 2t + 9 (registers 2, 3).
    uint32_t a_regs[4];
    const int row = 16 * (t / 32) + (t % 32) / 4, col = 2 * (t % 4);
    auto pair = [](int r, int c) {
      return static_cast<uint32_t>((*s_a)[r * 16 + c]) | static_cast<uint32_t>((*s_a)[r * 16 + c + 1]) << 16;
    };
    a_regs[0] = pair(row, col);
    a_regs[1] = pair(row + 8, col);
    a_regs[2] = pair(row, col + 8);
    a_regs[3] = pair(row + 8, col + 8);
    emulation::wgmma_fence();
    if (k.a_in_registers)
      emulation::wgmma_mma_async_rs(d, k.n, k.bf16, a_regs, s_desc_b, k.accumulate, k.scale_a, 1, k.b.mn_major);
    else
      emulation::wgmma_mma_async_ss(d, k.n, k.bf16, s_desc_a, s_desc_b, k.accumulate, k.scale_a, 1, k.a.mn_major,
                                    k.b.mn_major);
    emulation::wgmma_commit_group();
    for (int i = 0; i < regs; ++i) s_run.early[static_cast<size_t>(t * regs + i)] = d[i];
    emulation::wgmma_wait_group(0);
    for (int i = 0; i < regs; ++i) s_run.late[static_cast<size_t>(t * regs + i)] = d[i];
  });
  return s_run;
}

void check_case(const Case& c, uint32_t seed) {
  SCOPED_TRACE(std::string(c.bf16 ? "bf16" : "fp16") + " N=" + std::to_string(c.n) + " A " +
               (c.a_in_registers ? "in registers" : describe(c.a)) + ", B " + describe(c.b) +
               (c.accumulate ? ", accumulate" : ", overwrite") + (c.scale_a < 0 ? ", A negated" : ""));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<uint16_t> a(64 * 16), b(static_cast<size_t>(c.n) * 16);
  for (uint16_t& x : a) x = float_to_16(uniform(rng), c.bf16);
  for (uint16_t& x : b) x = float_to_16(uniform(rng), c.bf16);
  const float initial = 0.25f;
  const Run run = run_case(c, a, b, initial);
  ASSERT_EQ(run.error, "");
  const int regs = c.n / 2;
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < regs; ++i) {
      const float before = initial + static_cast<float>(i);
      // Undefined until the wait (ISA): the emulator's signaling NaN.
      ASSERT_TRUE(testing::is_signaling_nan(run.early[static_cast<size_t>(t * regs + i)]))
          << "register " << i << " of thread " << t << " held " << run.early[static_cast<size_t>(t * regs + i)]
          << " between the issue and the wait, not a signaling NaN";
      const testing::Element e = testing::accumulator_element(t, i);
      double sum = c.accumulate ? before : 0.0, magnitude = std::fabs(sum);
      for (int k = 0; k < 16; ++k) {
        const double product = static_cast<double>(float_from_16(a[e.row * 16 + k], c.bf16)) * c.scale_a *
                               float_from_16(b[e.column * 16 + k], c.bf16);
        sum += product;
        magnitude += std::fabs(product);
      }
      ASSERT_NEAR(run.late[static_cast<size_t>(t * regs + i)], sum, 1e-6 * magnitude + 1e-6)
          << "thread " << t << " register " << i << " = D(" << e.row << ", " << e.column << ")";
    }
}

TEST(Wgmma, SharedOperandsInEverySwizzleAndMajor) {
  uint32_t seed = 1;
  for (const uint32_t span : {0u, 32u, 64u, 128u}) {
    // K-major A and B, then MN-major A and B, in this swizzle; bf16 and fp16 alternate.
    check_case({span != 64, 64, false, make_layout(false, span, 64), make_layout(false, span, 64), false, 1}, seed++);
    check_case({span == 64, 64, false, make_layout(true, span, 64), make_layout(true, span, 64), true, 1}, seed++);
  }
}

TEST(Wgmma, MixedLayoutsShapesAndScales) {
  // N = 8 and 256, and 128 with one operand of each major and a negated A.
  check_case({true, 8, false, make_layout(false, 32, 64), make_layout(false, 0, 8), false, 1}, 11);
  check_case({false, 256, false, make_layout(false, 128, 64), make_layout(true, 64, 256), true, 1}, 12);
  check_case({true, 128, false, make_layout(true, 128, 64), make_layout(false, 64, 128), true, -1}, 13);
}

TEST(Wgmma, AFromRegisters) {
  const Layout unused{};
  check_case({true, 64, true, unused, make_layout(false, 128, 64), false, 1}, 21);
  check_case({false, 32, true, unused, make_layout(true, 64, 32), true, 1}, 22);
  check_case({true, 16, true, unused, make_layout(true, 0, 16), true, -1}, 23);
}

}  // namespace
}  // namespace cpgen
