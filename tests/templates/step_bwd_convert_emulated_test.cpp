// The backward's final conversion (templates/step_bwd_pre.cuh, ring_bwd_convert) on the CPU
// emulator: every element of a strided gradient tensor is written from its fp32 accumulator row,
// padding between rows and memory past the end stay untouched, and rounding is to nearest even.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// Last: defines __CUDACC__ and the CUDA keywords for the template headers below.
#include "emulation/cuda_emulation.h"
#include "emulation/finding_test_util.h"
#include "cpgen/step_bwd_pre.cuh"

namespace cpgen {
namespace {

constexpr uint16_t kPoison = 0x7fc1;  // a NaN in both bf16 and fp16; no conversion produces it
constexpr int kGuard = 64;

// bf16 rounding to nearest even by bit arithmetic, written here independently of the emulator.
uint16_t bf16_nearest_even(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint32_t lower = bits & 0xffffu;
  uint32_t upper = bits >> 16;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u))) ++upper;
  return static_cast<uint16_t>(upper);
}

struct ConvertCase {
  int batch, heads, len, pitch;  // pitch: elements between rows of grad (>= head dim)
};

// Runs the conversion over acc and returns the grad buffer, [batch][heads][len][pitch] + guard.
// Both are the launch's global buffers, so the sanitizer checks every access against them; acc
// is registered with `acc_rows` rows (default: all of it).
template <typename T, int kHeadDim, int kWarps>
std::vector<uint16_t> convert(const ConvertCase& c, const std::vector<float>& acc, std::string& error,
                              size_t acc_rows = SIZE_MAX) {
  std::vector<uint16_t> grad(static_cast<size_t>(c.batch) * c.heads * c.len * c.pitch + kGuard, kPoison);
  RingBwdConvertParams params;
  std::memset(&params, 0, sizeof params);
  params.acc = acc.data();
  params.grad = grad.data();
  params.grad_row_stride = c.pitch;
  params.grad_head_stride = static_cast<int64_t>(c.len) * c.pitch;
  params.grad_batch_stride = params.grad_head_stride * c.heads;
  params.batch = c.batch;
  params.heads = c.heads;
  params.len = c.len;
  const unsigned blocks = static_cast<unsigned>((c.batch * c.heads * c.len + kWarps - 1) / kWarps);
  const size_t acc_bytes = std::min(acc.size(), acc_rows * kHeadDim) * sizeof(float);
  const testing::LaunchBuffers buffers({emulation::GlobalBuffer{acc.data(), acc_bytes, nullptr, false},
                                        emulation::GlobalBuffer{grad.data(), grad.size() * sizeof(uint16_t), nullptr, false}});
  error = emulation::launch(blocks, 1, kWarps * 32, 0,
                            [&] { device::ring_bwd_convert<T, kHeadDim, kWarps>(params); });
  return grad;
}

// Values on the 1/64 grid below 4 are exact in bf16 and fp16, so the expected bits do not depend
// on any rounding code; every row gets distinct values so a row written to the wrong place shows.
template <typename T, int kHeadDim, int kWarps>
void check_exact_grid(const ConvertCase& c, bool bf16) {
  const size_t rows = static_cast<size_t>(c.batch) * c.heads * c.len;
  std::vector<float> acc(rows * kHeadDim);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> grid(-255, 255);
  for (float& x : acc) x = grid(rng) / 64.0f;
  std::string error;
  const std::vector<uint16_t> grad = convert<T, kHeadDim, kWarps>(c, acc, error);
  ASSERT_EQ(error, "");
  for (size_t row = 0; row < rows; ++row)
    for (int col = 0; col < c.pitch; ++col) {
      const uint16_t got = grad[row * c.pitch + col];
      if (col >= kHeadDim) {
        ASSERT_EQ(got, kPoison) << "padding of row " << row << " column " << col << " was written";
        continue;
      }
      const float want = acc[row * kHeadDim + col];
      ASSERT_EQ(emulation::float_from_16(got, bf16), want) << "row " << row << " column " << col;
    }
  for (int i = 0; i < kGuard; ++i) ASSERT_EQ(grad[rows * c.pitch + i], kPoison) << "guard " << i;
}

TEST(StepBwdConvertEmulated, Bf16StridedRowsEveryElementOnce) {
  check_exact_grid<device::Bf16, 64, 4>({2, 3, 5, 72}, true);
}

TEST(StepBwdConvertEmulated, Fp16HeadDim128RowsNotAMultipleOfWarps) {
  // 1 * 2 * 7 = 14 rows over blocks of 4 warps: the last block has two idle warps.
  check_exact_grid<device::Fp16, 128, 4>({1, 2, 7, 128}, false);
}

TEST(StepBwdConvertEmulated, HeadDim256LanesWriteTwoPairsEach) {
  check_exact_grid<device::Bf16, 256, 2>({1, 1, 3, 264}, true);
}

// With its buffers registered, the sanitizer sees every access of the conversion: an
// accumulator one row shorter than the rows the launch covers is a read past its end.
TEST(StepBwdConvertEmulated, AnAccumulatorShorterThanTheLaunchIsAReadPastItsEnd) {
  const ConvertCase c{1, 2, 5, 64};
  std::vector<float> acc(static_cast<size_t>(c.batch) * c.heads * c.len * 64, 0.5f);
  std::string error;
  convert<device::Bf16, 64, 4>(c, acc, error, c.batch * c.heads * c.len - 1);
  testing::expect_finding(error, {"a global load", "past the end of the 2304-byte buffer", "step_bwd_pre.cuh"});
  convert<device::Bf16, 64, 4>(c, acc, error);
  EXPECT_EQ(error, "") << "the whole accumulator registered: no finding";
}

TEST(StepBwdConvertEmulated, Bf16RoundsToNearestEven) {
  const ConvertCase c{1, 1, 2, 64};
  std::vector<float> acc(2 * 64);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> any(-3.0f, 3.0f);
  for (float& x : acc) x = any(rng);
  // Exact ties: 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7 (rounds down to the
  // even 1); 1 + 3 * 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6 (rounds up to the even one).
  acc[0] = 1.0f + 1.0f / 256;
  acc[1] = 1.0f + 3.0f / 256;
  acc[2] = -(1.0f + 1.0f / 256);
  std::string error;
  const std::vector<uint16_t> grad = convert<device::Bf16, 64, 4>(c, acc, error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(emulation::float_from_16(grad[0], true), 1.0f);
  EXPECT_EQ(emulation::float_from_16(grad[1], true), 1.0f + 1.0f / 64);
  EXPECT_EQ(emulation::float_from_16(grad[2], true), -1.0f);
  for (size_t i = 0; i < acc.size(); ++i) ASSERT_EQ(grad[i], bf16_nearest_even(acc[i])) << "element " << i;
}

}  // namespace
}  // namespace cpgen
