#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpgen/error.h"
#include "runtime/ring/schedule.h"
#include "tuner/gpu_timer.h"
#include "tuner/step_inputs.h"
#include "../cache/cache_fixtures.h"

namespace cpgen::testing {
namespace {

// Tile classes over a whole step, from the positions (16 x 16 tiles).
std::map<TileWork, int> tile_classes(const StepPositions& pos, bool causal) {
  std::map<TileWork, int> counts;
  for (size_t q = 0; q < pos.q.size(); q += 16)
    for (size_t k = 0; k < pos.kv.size(); k += 16)
      ++counts[classify_tile(pos.q[q], pos.q[std::min(q + 15, pos.q.size() - 1)], pos.kv[k],
                             pos.kv[std::min(k + 15, pos.kv.size() - 1)], causal)];
  return counts;
}

bool increasing(const std::vector<int>& v) {
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] <= v[i - 1]) return false;
  return true;
}

TEST(StepInputs, PositionsGiveEachStepTypeItsMaskPattern) {
  WorkloadKey diag = test_workload(1024, StepType::kDiagonal);
  StepPositions d = step_positions(diag);
  ASSERT_EQ(d.q.size(), 1024u);
  EXPECT_TRUE(increasing(d.q) && increasing(d.kv));
  // Zigzag rank 0: chunk 0 then chunk 3 of four; the diagonal step masks, skips and runs full.
  EXPECT_EQ(d.q[511], 511);
  EXPECT_EQ(d.q[512], 1536);
  auto diag_tiles = tile_classes(d, true);
  EXPECT_GT(diag_tiles[TileWork::kMasked], 0);
  EXPECT_GT(diag_tiles[TileWork::kSkip], 0);
  EXPECT_GT(diag_tiles[TileWork::kFull], 0);
  // Every off-diagonal step type sees only keys in the past: all tiles full, none skipped.
  for (StepType step : {StepType::kFull, StepType::kZigzagKvHalf, StepType::kZigzagQHalf}) {
    WorkloadKey w = test_workload(1024, step);
    if (step == StepType::kZigzagQHalf) {
      w.q_len = 512;
      w.kv_len = 1024;
    }
    StepPositions p = step_positions(w);
    EXPECT_EQ(static_cast<int64_t>(p.q.size()), w.q_len);
    EXPECT_EQ(static_cast<int64_t>(p.kv.size()), w.kv_len);
    EXPECT_TRUE(increasing(p.q) && increasing(p.kv));
    auto tiles = tile_classes(p, true);
    EXPECT_EQ(tiles[TileWork::kMasked] + tiles[TileWork::kSkip], 0) << step_type_name(step);
    EXPECT_EQ(visible_pairs(p, true), w.q_len * w.kv_len) << step_type_name(step);
  }
  // Diagonal of zigzag: chunk 0 sees its triangle, chunk 3 sees chunk 0 and its own triangle.
  const int64_t h = 512;
  EXPECT_EQ(visible_pairs(d, true), h * (h + 1) / 2 + (h * h + h * (h + 1) / 2));
  EXPECT_EQ(visible_pairs(d, false), 1024 * 1024);
}

TEST(StepInputs, SixteenBitEncodingIsExactForTheInputGrid) {
  for (Dtype dtype : {Dtype::kBf16, Dtype::kFp16}) {
    for (int k = -64; k <= 64; ++k) {
      const double x = k / 64.0;
      EXPECT_EQ(decode_16(encode_exact(x, dtype), dtype), x) << dtype_name(dtype) << " " << x;
    }
  }
  EXPECT_EQ(encode_exact(1.0, Dtype::kFp16), 0x3c00);
  EXPECT_EQ(encode_exact(-2.0, Dtype::kFp16), 0xc000);
  EXPECT_EQ(encode_exact(1.0, Dtype::kBf16), 0x3f80);
  EXPECT_TRUE(std::isnan(decode_16(0xffff, Dtype::kBf16)));  // the poison pattern
  EXPECT_TRUE(std::isnan(decode_16(0xffff, Dtype::kFp16)));
  EXPECT_EQ(decode_16(0x0001, Dtype::kFp16), std::ldexp(1.0, -24));
  EXPECT_THROW(encode_exact(1.0 / 3.0, Dtype::kBf16), Error);
}

TEST(StepInputs, ReferenceRowMatchesAHandComputedSoftmax) {
  // One query against three keys with scores 0, ln 2, ln 4 after scaling: weights 1:2:4.
  const int hd = 2;
  const double q[] = {1.0, 0.0};
  const double k[] = {0.0, 0.0, std::log(2.0), 0.0, std::log(4.0), 0.0};
  const double v[] = {7.0, 0.0, 0.0, 7.0, 7.0, 7.0};
  double out[2], lse;
  reference_row(q, k, v, 3, hd, 1.0, 10, {0, 1, 2}, true, out, &lse);
  EXPECT_NEAR(out[0], (7.0 * 1 + 7.0 * 4) / 7.0, 1e-12);
  EXPECT_NEAR(out[1], (7.0 * 2 + 7.0 * 4) / 7.0, 1e-12);
  EXPECT_NEAR(lse, std::log(7.0), 1e-12);
  // A causal query at position 1 sees only the first two keys.
  reference_row(q, k, v, 3, hd, 1.0, 1, {0, 1, 2}, true, out, &lse);
  EXPECT_NEAR(lse, std::log(3.0), 1e-12);
  // No visible key: lse = -inf and a zero row, never NaN.
  reference_row(q, k, v, 3, hd, 1.0, -1, {0, 1, 2}, true, out, &lse);
  EXPECT_TRUE(std::isinf(lse) && lse < 0);
  EXPECT_EQ(out[0], 0.0);
}

// The interval arrays a masked workload's timers upload: the mask model's visible keys of each
// local query, with the documents laid out from position 0 at the key's document length.
TEST(StepInputs, KeyIntervalsFollowTheMaskModel) {
  // A full step of 64 rows: queries at [64, 128), keys at [0, 64).
  WorkloadKey w = test_workload(64, StepType::kFull);
  w.mask.window_left = 16;
  const StepPositions pos = step_positions(w);
  AttentionShape mask = step_mask(w, pos);
  StepKeyIntervals keys = step_key_intervals(mask, pos);
  ASSERT_EQ(keys.first.size(), 64u);
  ASSERT_EQ(keys.last.size(), 64u);
  for (size_t i = 0; i < pos.q.size(); ++i) {
    const KeyInterval want = visible_keys(mask, pos.q[i]);
    EXPECT_EQ(keys.first[i], want.first) << i;
    EXPECT_EQ(keys.last[i], want.last) << i;
  }
  EXPECT_EQ(keys.first[0], 48);  // query 64 sees [48, 64]
  EXPECT_EQ(keys.last[0], 64);
  EXPECT_EQ(keys.first[63], 111);
  // Queries 64..79 see 16, 15, ..., 1 of the step's keys: 136 pairs.
  EXPECT_EQ(visible_pairs(pos, mask), 136);

  // Documents of 32 tokens: [64, 96) and [96, 128) hold no key of this step, so nothing is seen.
  w.mask.document_len = 32;
  mask = step_mask(w, pos);
  EXPECT_EQ(mask.cu_seqlens, (std::vector<int64_t>{0, 32, 64, 96, 128}));
  keys = step_key_intervals(mask, pos);
  EXPECT_EQ(keys.first[36], 96);  // query 100: [max(96, 84), 100]
  EXPECT_EQ(keys.last[36], 100);
  EXPECT_EQ(visible_pairs(pos, mask), 0);

  // Not causal with only a right window: the open left side is clamped to 0 as the runtime does.
  w.causal = false;
  w.mask = {};
  w.mask.window_right = 8;
  mask = step_mask(w, pos);
  keys = step_key_intervals(mask, pos);
  EXPECT_EQ(keys.first[0], 0);
  EXPECT_EQ(keys.last[0], 72);
  EXPECT_EQ(visible_pairs(pos, mask), 64 * 64);
  EXPECT_EQ(mask.softcap, 0.0);
  w.mask.softcap = true;
  EXPECT_EQ(step_mask(w, pos).softcap, kTuneSoftcap);
}

TEST(StepInputs, MaskedReferenceRowAppliesTheWindowAndTheSoftcap) {
  const double q[] = {1.0};
  const double k[] = {2.0, 0.0};
  const double v[] = {1.0, 3.0};
  AttentionShape mask;
  mask.scale = 1.0;
  mask.causal = true;
  mask.softcap = 1.0;
  double out, lse;
  // Logits tanh(2) and tanh(0) = 0.
  reference_row(q, k, v, 2, 1, mask, 5, {0, 5}, &out, &lse);
  const double e = std::exp(std::tanh(2.0));
  EXPECT_NEAR(out, (e * 1.0 + 3.0) / (e + 1.0), 1e-12);
  EXPECT_NEAR(lse, std::log(e + 1.0), 1e-12);
  // A window of 2 behind the query leaves only the key at its own position.
  mask.window_left = 2;
  reference_row(q, k, v, 2, 1, mask, 5, {0, 5}, &out, &lse);
  EXPECT_NEAR(out, 3.0, 1e-12);
  EXPECT_NEAR(lse, 0.0, 1e-12);
}

TEST(StepInputs, TolerancesFollowThePrecision) {
  EXPECT_EQ(GpuTimer::output_tolerance(Dtype::kBf16), std::ldexp(1.0, -6));
  EXPECT_EQ(GpuTimer::output_tolerance(Dtype::kFp16), std::ldexp(1.0, -9));
  EXPECT_LT(GpuTimer::lse_tolerance(10.0), 2e-3);
}

// The forward timer's check is absolute (GpuTimer::output_tolerance): its scores are peaked
// (forward_timing_mask), so that a row's output is of the values' size and an output that is
// zero, or a softcap the kernel ignores, is far outside the tolerance. With 1/sqrt(head_dim) the
// rows of a 16K-key step averaged thousands of values to under the tolerance.
TEST(StepInputs, ForwardTimingScoresArePeakedSoTheCheckSeesTheOutputs) {
  WorkloadKey w = test_workload(16384, StepType::kFull);
  w.causal = false;
  const StepPositions pos = step_positions(w);
  const uint64_t seed = timing_seed(w);
  const std::vector<double> k = grid_values(seed, kInputK, static_cast<size_t>(w.kv_len * w.head_dim));
  const std::vector<double> v = grid_values(seed, kInputV, static_cast<size_t>(w.kv_len * w.head_dim));
  const double tol = GpuTimer::output_tolerance(Dtype::kBf16);
  // The share of a few rows' output elements farther than the tolerance from zero, and (with
  // `other`) the share of those rows whose out or lse is outside the check's tolerance of the
  // row under another mask.
  auto outside = [&](const AttentionShape& mask, const AttentionShape* other) {
    int64_t far = 0, total = 0, rows_far = 0, rows = 0;
    std::vector<double> out(w.head_dim), out2(w.head_dim);
    double lse = 0, lse2 = 0;
    for (int64_t row = 0; row < w.q_len; row += w.q_len / 8, ++rows) {
      const std::vector<double> q = grid_values_at(seed, kInputQ, row * w.head_dim, w.head_dim);
      reference_row(q.data(), k.data(), v.data(), w.kv_len, w.head_dim, mask, pos.q[row], pos.kv, out.data(), &lse);
      if (other) {
        reference_row(q.data(), k.data(), v.data(), w.kv_len, w.head_dim, *other, pos.q[row], pos.kv, out2.data(),
                      &lse2);
      }
      bool row_far = other && !GpuTimer::lse_agrees(lse, lse2);
      for (int64_t d = 0; d < w.head_dim; ++d, ++total) {
        const bool element_far = std::abs(out[d] - (other ? out2[d] : 0.0)) > tol;
        far += element_far;
        row_far = row_far || element_far;
      }
      rows_far += row_far;
    }
    return other ? static_cast<double>(rows_far) / static_cast<double>(rows)
                 : static_cast<double>(far) / static_cast<double>(total);
  };
  EXPECT_GT(outside(forward_timing_mask(w, pos), nullptr), 0.8);
  EXPECT_LT(outside(step_mask(w, pos), nullptr), 0.01) << "why the forward timer does not use 1/sqrt(head_dim)";
  // A softcap workload keeps the small logits (tanh.approx's error grows with them); the check
  // still tells a kernel that ignores the cap.
  w.mask.softcap = true;
  const AttentionShape capped = forward_timing_mask(w, pos);
  EXPECT_EQ(capped.softcap, kTuneSoftcap);
  EXPECT_EQ(capped.scale, step_mask(w, pos).scale);
  AttentionShape uncapped = capped;
  uncapped.softcap = 0;
  EXPECT_EQ(outside(capped, &uncapped), 1.0) << "a kernel that ignores the cap must fail the check on every row";
}

// Under a window, a zigzag step's queries far past its keys see none of them: the float64 lse
// of such a row is -inf, as the kernel's is, and the check must accept that (-inf - -inf is a
// NaN, which no tolerance admits; every masked workload with such rows was rejected for it).
TEST(StepInputs, ARowThatSeesNoKeyOfTheStepHasLseMinusInfinityAndAgrees) {
  WorkloadKey w = test_workload(1024, StepType::kZigzagKvHalf);
  w.causal = true;
  w.mask.window_left = 64;
  w.mask.window_right = 0;
  const StepPositions pos = step_positions(w);
  const AttentionShape mask = step_mask(w, pos);
  const std::vector<double> q(w.head_dim, 0.25), k(static_cast<size_t>(w.kv_len * w.head_dim), 0.5),
      v(static_cast<size_t>(w.kv_len * w.head_dim), 1.0);
  std::vector<double> out(w.head_dim);
  double lse = 0;
  reference_row(q.data(), k.data(), v.data(), w.kv_len, w.head_dim, mask, pos.q.back(), pos.kv, out.data(), &lse);
  ASSERT_EQ(lse, -std::numeric_limits<double>::infinity()) << "the last query of the step sees no key";
  const double kernel_lse = -std::numeric_limits<float>::infinity();
  EXPECT_TRUE(GpuTimer::lse_agrees(kernel_lse, lse));
  EXPECT_FALSE(GpuTimer::lse_agrees(0.0, lse));
  EXPECT_FALSE(GpuTimer::lse_agrees(lse, 0.0));
  EXPECT_FALSE(GpuTimer::lse_agrees(std::nan(""), std::nan("")));
  EXPECT_TRUE(GpuTimer::lse_agrees(10.0005, 10.0));
  EXPECT_FALSE(GpuTimer::lse_agrees(10.01, 10.0));
}

// The timing harness's random inputs: values k/64 with |k| <= 64 (exact in both 16-bit types),
// each a function of (seed, tensor, index) only, so a shorter draw is a prefix of a longer one
// whatever the thread count; another seed or tensor is another stream; roughly uniform (both
// signs, both ends, mean near 0).
TEST(StepInputs, GridValuesAreExactReproducibleAndIndependentPerSeedAndTensor) {
  const size_t count = 3 * (size_t{1} << 20) + 1000;  // several of the draw's parallel blocks
  const std::vector<double> a = grid_values(42, 0, count);
  ASSERT_EQ(a.size(), count);
  EXPECT_EQ(grid_values(42, 0, count), a);
  EXPECT_NE(grid_values(43, 0, count), a);
  EXPECT_NE(grid_values(42, 1, count), a);
  const std::vector<double> prefix = grid_values(42, 0, 1000);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), a.begin())) << "the values must not depend on the count";
  // The second parallel block is not the first again.
  EXPECT_FALSE(std::equal(a.begin(), a.begin() + 1000, a.begin() + (size_t{1} << 20)));
  double sum = 0, lo = 1, hi = -1;
  for (double x : a) {
    EXPECT_EQ(x * 64, std::round(x * 64)) << x;
    sum += x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_EQ(lo, -1.0);
  EXPECT_EQ(hi, 1.0);
  EXPECT_LT(std::abs(sum / count), 0.01);
  EXPECT_TRUE(grid_values(1, 0, 0).empty());
}

// What the GPU receives: grid_bits is encode_exact of grid_values, element by element, for every
// element of a draw spanning several threads' ranges, in both 16-bit types.
TEST(StepInputs, GridBitsAreTheExactEncodingsOfGridValues) {
  const size_t count = 3 * (size_t{1} << 20) + 1001;
  const std::vector<double> values = grid_values(42, kInputK, count);
  for (Dtype dtype : {Dtype::kBf16, Dtype::kFp16}) {
    const std::vector<uint16_t> bits = grid_bits(42, kInputK, count, dtype);
    ASSERT_EQ(bits.size(), count);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += bits[i] != encode_exact(values[i], dtype);
    EXPECT_EQ(wrong, 0u) << dtype_name(dtype);
    EXPECT_NE(bits, grid_bits(42, kInputV, count, dtype)) << "another tensor is another draw";
  }
  EXPECT_TRUE(grid_bits(1, kInputQ, 0, Dtype::kBf16).empty());
}

// The rows a check reads: grid_values_at(first, count) is that slice of the whole draw, across
// the draw's parallel blocks too.
TEST(StepInputs, GridValuesAtIsASliceOfTheWholeDraw) {
  const size_t count = (size_t{1} << 20) + 4096;
  const std::vector<double> all = grid_values(9, kInputQ, count);
  for (size_t first : {size_t{0}, size_t{127}, (size_t{1} << 20) - 64, count - 128}) {
    const std::vector<double> slice = grid_values_at(9, kInputQ, first, 128);
    ASSERT_EQ(slice.size(), 128u);
    EXPECT_TRUE(std::equal(slice.begin(), slice.end(), all.begin() + static_cast<std::ptrdiff_t>(first))) << first;
  }
  EXPECT_TRUE(grid_values_at(9, kInputQ, 5, 0).empty());
}

}  // namespace
}  // namespace cpgen::testing
