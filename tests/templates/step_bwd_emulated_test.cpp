// The backward kernel templates (step_bwd_pre.cuh, step_bwd.cuh) run on the CPU by the CUDA
// emulator, over rings of 1, 2 and 4 zigzag ranks: the preprocessing kernel once per rank, then
// the step kernel per (rank, step) in the CPU ring's schedule (runtime/backend/cpu_backend.cpp,
// runtime/ring/ring_driver.cpp): at step s rank r holds the K/V chunk of rank (r - s) mod N and
// adds its part into that chunk's fp32 dK/dV accumulators, which started at the chunk's owner
// (step 0 writes them) and reach it again after N steps. dq, dk and dv (rounded to the input
// dtype, as the last step's conversion would) are compared with float64: the shared vectors and
// the project's own reference (runtime/ring/reference.h). Every accumulator starts as NaN and has
// a NaN guard past its end, so an element left unwritten, or written out of bounds, fails.
#include <gtest/gtest.h>

#include <bit>
#include <filesystem>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "error_limit.h"
#include "ring_step_harness.h"
#include "runtime/ring/reference.h"
#include "test_util.h"

// Last: defines __CUDACC__ and the CUDA keywords for the template headers below.
#include "emulation/cuda_emulation.h"
#include "cpgen/step_bwd.cuh"
#include "element_dtype.h"
#include "cpgen/step_bwd_pre.cuh"

namespace cpgen {
namespace {

using testing::AttentionProblem;

constexpr int kGuard = 64;  // NaN floats past the end of every accumulator
constexpr int kPreWarps = 4;

struct Grads {
  std::vector<double> dq, dk, dv;  // full-sequence layouts, [batch][heads][seq][head_dim]
};

struct BackwardCase {
  AttentionProblem p;
  std::vector<double> out, lse, dout;  // forward results and the incoming gradient
  Grads expected;
};

size_t index4(int b, int h, int s, int d, int heads, int seq, int dim) {
  return ((static_cast<size_t>(b) * heads + h) * seq + s) * dim + d;
}

std::vector<int64_t> all_positions(int seq_len) {
  std::vector<int64_t> pos(seq_len);
  for (int i = 0; i < seq_len; ++i) pos[i] = i;
  return pos;
}

// Random inputs on the 1/32 grid and float64 out, lse and gradients from the project's reference.
BackwardCase random_case(int batch, int q_heads, int kv_heads, int head_dim, int seq_len, bool causal,
                         uint32_t seed) {
  BackwardCase c;
  c.p = testing::random_problem(batch, q_heads, kv_heads, head_dim, seq_len, causal, seed);
  std::mt19937 rng(seed * 7919u + 1);
  std::normal_distribution<double> normal(0.0, 1.0);
  c.dout.resize(c.p.q.size());
  for (double& x : c.dout) x = std::round(normal(rng) * 32.0) / 32.0;
  AttentionShape shape;
  shape.batch = batch;
  shape.q_heads = q_heads;
  shape.kv_heads = kv_heads;
  shape.head_dim = head_dim;
  shape.scale = c.p.softmax_scale;
  shape.causal = causal;
  const std::vector<int64_t> pos = all_positions(seq_len);
  ReferenceForward fwd = reference_forward(shape, c.p.q, c.p.k, c.p.v, pos, pos);
  c.out = fwd.out;
  c.lse = fwd.lse;
  ReferenceGrads g = reference_backward(shape, c.p.q, c.p.k, c.p.v, c.out, c.dout, c.lse, pos, pos);
  c.expected = {g.dq, g.dk, g.dv};
  return c;
}

// A float64 vectors case (out, lse, dout and gradients of its own) from the folder `dir`.
BackwardCase vector_case(const std::string& dir, const std::string& name) {
  BackwardCase c;
  testing::AttentionOutput fwd;
  const std::string path = dir + "/" + name + ".json";
  c.p = testing::load_vector_case(path, &fwd);
  c.out = fwd.out;
  c.lse = fwd.lse;
  nlohmann::json j = testing::load_json(path);
  c.dout = j.at("dout").get<std::vector<double>>();
  c.expected = {j.at("dq").get<std::vector<double>>(), j.at("dk").get<std::vector<double>>(),
                j.at("dv").get<std::vector<double>>()};
  return c;
}

// The folder of the first independent vectors set (not the in-repo one) that holds `name`, or ""
// where none is present: those sets are optional.
std::string independent_set_with(const std::string& name) {
  for (const testing::VectorSet& set : testing::vector_sets())
    if (set.name != "repo" && std::filesystem::exists(set.dir + "/" + name + ".json")) return set.dir;
  return "";
}

// n floats and the guard, all ones: a NaN, and the fill the sanitizer recognizes as never written in
// a buffer marked poisoned (GlobalBuffer::poisoned), as the emulated device fills an allocation.
std::vector<float> poisoned(size_t n) { return std::vector<float>(n + kGuard, std::bit_cast<float>(0xFFFFFFFFu)); }

// A launch's global buffer: `bytes` of `data`, poisoned (the guard past an accumulator is left out,
// so a write into it is a finding too).
emulation::GlobalBuffer buffer(const void* data, size_t bytes) { return {data, bytes, nullptr, true}; }

// Runs a launch with `buffers` as its global buffers.
std::string launch_on(std::vector<emulation::GlobalBuffer> buffers, const std::function<std::string()>& launch) {
  emulation::set_global_buffers(buffers.data(), static_cast<int>(buffers.size()));
  const std::string error = launch();
  emulation::set_global_buffers(nullptr, 0);
  return error;
}

bool guard_intact(const std::vector<float>& v, size_t n) {
  for (size_t i = n; i < v.size(); ++i)
    if (!std::isnan(v[i])) return false;
  return true;
}

struct RingResult {
  Grads grads;  // rounded to the input dtype, as the ring's last conversion writes them
  Grads raw;    // the fp32 accumulators themselves
  std::string failure;
};

// Writes the fp32 accumulator `acc` ([batch][heads][rows][dim]) rounded to `dtype` into `full` at
// `positions`; records the first element that is not finite.
void place(const std::vector<float>& acc, int batch, int heads, int seq, int dim,
           const std::vector<int>& positions, Dtype dtype, const std::string& what,
           std::vector<double>* full, std::vector<double>* raw, std::string* failure) {
  const int rows = static_cast<int>(positions.size());
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int r = 0; r < rows; ++r)
        for (int d = 0; d < dim; ++d) {
          const float value = acc[index4(b, h, r, d, heads, rows, dim)];
          if (!std::isfinite(value) && failure->empty())
            *failure = what + "[b" + std::to_string(b) + " h" + std::to_string(h) + " pos " +
                       std::to_string(positions[r]) + " d" + std::to_string(d) + "] = " +
                       std::to_string(value) + " (not written or not finite)";
          const size_t at = index4(b, h, positions[r], d, heads, seq, dim);
          (*full)[at] = testing::from_bits(testing::to_bits(value, dtype), dtype);
          (*raw)[at] = value;
        }
}

template <typename Traits>
RingResult run_backward(const BackwardCase& c, const std::vector<std::vector<int>>& ranks,
                        unsigned max_grid_y = device::kMaxGridYZ) {
  using T = typename Traits::Element;
  const Dtype dtype = testing::element_dtype<T>();
  const AttentionProblem& p = c.p;
  const int B = p.batch, HQ = p.q_heads, HK = p.kv_heads, D = p.head_dim, S = p.seq_len;
  const int pitch = D + testing::kRowPad, n = static_cast<int>(ranks.size());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  RingResult result;
  result.grads.dq.assign(static_cast<size_t>(B) * HQ * S * D, nan);
  result.grads.dk.assign(static_cast<size_t>(B) * HK * S * D, nan);
  result.grads.dv.assign(result.grads.dk.size(), nan);
  result.raw = result.grads;

  struct Rank {
    std::vector<uint16_t> q, k, v, out, dout;
    std::vector<float> lse, delta, dq_acc, dk_acc, dv_acc;
    int len = 0;
  };
  std::vector<Rank> rk(n);
  for (int r = 0; r < n; ++r) {
    Rank& x = rk[r];
    x.len = static_cast<int>(ranks[r].size());
    x.q = testing::gather_rows(p.q, B, HQ, S, D, ranks[r], dtype);
    x.out = testing::gather_rows(c.out, B, HQ, S, D, ranks[r], dtype);
    x.dout = testing::gather_rows(c.dout, B, HQ, S, D, ranks[r], dtype);
    x.k = testing::gather_rows(p.k, B, HK, S, D, ranks[r], dtype);
    x.v = testing::gather_rows(p.v, B, HK, S, D, ranks[r], dtype);
    x.lse.resize(static_cast<size_t>(B) * HQ * x.len);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < HQ; ++h)
        for (int i = 0; i < x.len; ++i)
          x.lse[(static_cast<size_t>(b) * HQ + h) * x.len + i] =
              static_cast<float>(c.lse[(static_cast<size_t>(b) * HQ + h) * S + ranks[r][i]]);
    x.delta = poisoned(x.lse.size());
    x.dq_acc = poisoned(x.lse.size() * D);
    x.dk_acc = poisoned(static_cast<size_t>(B) * HK * x.len * D);
    x.dv_acc = poisoned(x.dk_acc.size() - kGuard);

    RingBwdPreParams pre;
    std::memset(&pre, 0, sizeof pre);
    pre.out = x.out.data();
    pre.dout = x.dout.data();
    pre.delta = x.delta.data();
    pre.dq_acc = x.dq_acc.data();
    pre.out_row_stride = pre.dout_row_stride = pitch;
    pre.out_head_stride = pre.dout_head_stride = static_cast<int64_t>(x.len) * pitch;
    pre.out_batch_stride = pre.dout_batch_stride = pre.out_head_stride * HQ;
    pre.batch = B;
    pre.q_heads = HQ;
    pre.q_len = x.len;
    const unsigned pre_grid = (B * HQ * x.len + kPreWarps - 1) / kPreWarps;
    const std::string error =
        launch_on({buffer(x.out.data(), x.out.size() * 2), buffer(x.dout.data(), x.dout.size() * 2),
                   buffer(x.delta.data(), x.lse.size() * 4), buffer(x.dq_acc.data(), x.lse.size() * D * 4)},
                  [&] {
                    return emulation::launch(pre_grid, 1, kPreWarps * 32, 0,
                                             [&] { device::ring_bwd_pre<T, Traits::kHeadDim, kPreWarps>(pre); });
                  });
    if (!error.empty()) {
      result.failure = "pre kernel: " + error;
      return result;
    }
  }

  for (int step = 0; step < n; ++step)
    for (int r = 0; r < n; ++r) {
      const int src = ((r - step) % n + n) % n;
      Rank& mine = rk[r];
      Rank& chunk = rk[src];
      RingBwdParams prm;
      std::memset(&prm, 0, sizeof prm);
      prm.q = mine.q.data();
      prm.dout = mine.dout.data();
      prm.k = chunk.k.data();
      prm.v = chunk.v.data();
      prm.lse = mine.lse.data();
      prm.delta = mine.delta.data();
      prm.dq_acc = mine.dq_acc.data();
      prm.dk_acc = chunk.dk_acc.data();
      prm.dv_acc = chunk.dv_acc.data();
      prm.q_positions = ranks[r].data();
      prm.kv_positions = ranks[src].data();
      prm.q_row_stride = prm.dout_row_stride = prm.k_row_stride = prm.v_row_stride = pitch;
      prm.q_head_stride = prm.dout_head_stride = static_cast<int64_t>(mine.len) * pitch;
      prm.q_batch_stride = prm.dout_batch_stride = prm.q_head_stride * HQ;
      prm.k_head_stride = prm.v_head_stride = static_cast<int64_t>(chunk.len) * pitch;
      prm.k_batch_stride = prm.v_batch_stride = prm.k_head_stride * HK;
      prm.batch = B;
      prm.q_heads = HQ;
      prm.kv_heads = HK;
      prm.q_len = mine.len;
      prm.kv_len = chunk.len;
      prm.scale = static_cast<float>(p.softmax_scale);
      prm.scale_log2 = static_cast<float>(p.softmax_scale * 1.4426950408889634);
      prm.accumulate_dkv = step > 0;
      const unsigned grid_x = (chunk.len + Traits::kBlockN - 1) / Traits::kBlockN;
      const device::FoldedPairs pairs = device::fold_pairs(static_cast<long long>(B) * HK, max_grid_y);
      const size_t kv_acc_bytes = static_cast<size_t>(B) * HK * chunk.len * D * 4;
      const std::string error = launch_on(
          {buffer(mine.q.data(), mine.q.size() * 2), buffer(mine.dout.data(), mine.dout.size() * 2),
           buffer(chunk.k.data(), chunk.k.size() * 2), buffer(chunk.v.data(), chunk.v.size() * 2),
           buffer(mine.lse.data(), mine.lse.size() * 4), buffer(mine.delta.data(), mine.lse.size() * 4),
           buffer(mine.dq_acc.data(), mine.lse.size() * D * 4), buffer(chunk.dk_acc.data(), kv_acc_bytes),
           buffer(chunk.dv_acc.data(), kv_acc_bytes), buffer(ranks[r].data(), ranks[r].size() * 4),
           buffer(ranks[src].data(), ranks[src].size() * 4)},
          [&] {
            return emulation::launch(grid_x, pairs.y, pairs.z, Traits::kThreads, Traits::kSharedBytes,
                                     [&] { device::ring_bwd_step<Traits>(prm); });
          });
      if (!error.empty()) {
        result.failure = "step " + std::to_string(step) + " rank " + std::to_string(r) + ": " + error;
        return result;
      }
    }

  for (int r = 0; r < n; ++r) {
    const Rank& x = rk[r];
    const size_t q_size = x.lse.size() * D, kv_size = static_cast<size_t>(B) * HK * x.len * D;
    if (!guard_intact(x.delta, x.lse.size()) || !guard_intact(x.dq_acc, q_size) ||
        !guard_intact(x.dk_acc, kv_size) || !guard_intact(x.dv_acc, kv_size)) {
      result.failure = "rank " + std::to_string(r) + ": a kernel wrote past the end of an accumulator";
    }
    for (size_t i = 0; i < x.lse.size() && result.failure.empty(); ++i)
      if (!std::isfinite(x.delta[i])) result.failure = "rank " + std::to_string(r) + ": delta[" + std::to_string(i) + "] not written";
    place(x.dq_acc, B, HQ, S, D, ranks[r], dtype, "dq", &result.grads.dq, &result.raw.dq, &result.failure);
    place(x.dk_acc, B, HK, S, D, ranks[r], dtype, "dk", &result.grads.dk, &result.raw.dk, &result.failure);
    place(x.dv_acc, B, HK, S, D, ranks[r], dtype, "dv", &result.grads.dv, &result.raw.dv, &result.failure);
  }
  return result;
}

std::vector<std::vector<int>> split(int seq_len, int cp_size) {
  if (cp_size > 1) return testing::zigzag_split(seq_len, cp_size);
  std::vector<std::vector<int>> one(1);
  for (int i = 0; i < seq_len; ++i) one[0].push_back(i);
  return one;
}

struct Errors {
  double dq = 0, dk = 0, dv = 0;
  std::string worst;
};

// dq, dk and dv within the dtype's limit (error_limit.h).
void expect_gradients_within_limit(const Errors& e, Dtype dtype) {
  testing::expect_within_limit(e.dq, dtype, "dq, worst " + e.worst);
  testing::expect_within_limit(e.dk, dtype, "dk, worst " + e.worst);
  testing::expect_within_limit(e.dv, dtype, "dv, worst " + e.worst);
}

double rel_error(const std::vector<double>& actual, const std::vector<double>& expected, const char* what,
                 std::string* worst) {
  double err2 = 0, ref2 = 0, worst_diff = -1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double diff = std::isnan(actual[i]) ? std::numeric_limits<double>::infinity()
                                              : std::abs(actual[i] - expected[i]);
    err2 += diff * diff;
    ref2 += expected[i] * expected[i];
    if (diff > worst_diff) {
      worst_diff = diff;
      *worst = std::string(what) + "[" + std::to_string(i) + "]: expected " + std::to_string(expected[i]) +
               ", got " + std::to_string(actual[i]);
    }
  }
  return std::sqrt(err2 / std::max(ref2, 1e-300));
}

Errors errors_of(const Grads& actual, const Grads& expected) {
  Errors e;
  std::string w;
  e.dq = rel_error(actual.dq, expected.dq, "dq", &w);
  e.worst = w;
  e.dk = rel_error(actual.dk, expected.dk, "dk", &w);
  e.worst += "; " + w;
  e.dv = rel_error(actual.dv, expected.dv, "dv", &w);
  e.worst += "; " + w;
  return e;
}

template <typename Traits>
Errors check(const BackwardCase& c, int cp_size, const std::string& what) {
  SCOPED_TRACE(what + ", " + std::to_string(cp_size) + " ranks");
  RingResult run = run_backward<Traits>(c, split(c.p.seq_len, cp_size));
  EXPECT_TRUE(run.failure.empty()) << run.failure;
  if (!run.failure.empty()) return {};
  const Errors e = errors_of(run.grads, c.expected);
  expect_gradients_within_limit(e, testing::element_dtype<typename Traits::Element>());
  return e;
}

using device::Bf16;
using device::BwdTraits;
using device::Fp16;

// The default configs (KernelSpec::backward_default_for) of each head dim.
template <typename E, bool kCausal, int kGroup>
using Hd64 = BwdTraits<E, 64, 64, 64, 4, 2, kCausal, kGroup>;
template <typename E, bool kCausal, int kGroup>
using Hd96 = BwdTraits<E, 96, 64, 64, 8, 2, kCausal, kGroup>;
template <typename E, bool kCausal, int kGroup>
using Hd128 = BwdTraits<E, 128, 64, 64, 8, 2, kCausal, kGroup>;
template <typename E, bool kCausal, int kGroup>
using Hd256 = BwdTraits<E, 256, 64, 32, 8, 1, kCausal, kGroup>;

TEST(StepBwdEmulated, Bf16Hd64CausalGqa1OneTwoAndFourSteps) {
  const BackwardCase c = random_case(1, 1, 1, 64, 2 * 4 * 12, true, 11);
  for (int n : {1, 2, 4}) check<Hd64<Bf16, true, 1>>(c, n, "random");
}

TEST(StepBwdEmulated, Fp16Hd64FullGqa4TwoSteps) {
  check<Hd64<Fp16, false, 4>>(random_case(1, 4, 1, 64, 2 * 2 * 20, false, 12), 2, "random");
}

TEST(StepBwdEmulated, Fp16Hd128CausalGqa4FourSteps) {
  check<Hd128<Fp16, true, 4>>(random_case(1, 4, 1, 128, 2 * 4 * 8, true, 13), 4, "random");
}

TEST(StepBwdEmulated, Bf16Hd128FullGqa1OneStep) {
  check<Hd128<Bf16, false, 1>>(random_case(2, 1, 1, 128, 40, false, 14), 1, "random");
}

TEST(StepBwdEmulated, Bf16Hd256CausalGqa4TwoSteps) {
  check<Hd256<Bf16, true, 4>>(random_case(1, 4, 1, 256, 2 * 2 * 10, true, 15), 2, "random");
}

TEST(StepBwdEmulated, Fp16Hd256FullGqa1FourSteps) {
  check<Hd256<Fp16, false, 1>>(random_case(1, 1, 1, 256, 2 * 4 * 4, false, 16), 4, "random");
}

// Off the defaults: two 16-key MMA tiles per warp (2 warps over 64 keys) and 16-row query tiles.
TEST(StepBwdEmulated, Fp16Hd64CausalTwoKeyTilesPerWarpTwoSteps) {
  check<BwdTraits<Fp16, 64, 16, 64, 2, 2, true, 1>>(random_case(1, 1, 1, 64, 2 * 2 * 24, true, 19), 2, "random");
}

// The project's own vectors (tests/data/vectors), always present.
TEST(StepBwdEmulated, Bf16Hd128CausalGqa2MatchesTheRepoVectors) {
  check<Hd128<Bf16, true, 2>>(vector_case(testing::vectors_dir(), "gqa2_causal_hd128_s32"), 2, "gqa2_causal_hd128_s32");
}

TEST(StepBwdEmulated, Bf16Hd64CausalGqa4MatchesTheRepoVectors) {
  check<Hd64<Bf16, true, 4>>(vector_case(testing::vectors_dir(), "gqa4_causal_hd64_s32"), 2, "gqa4_causal_hd64_s32");
}

TEST(StepBwdEmulated, Fp16Hd256FullMatchesTheRepoVectors) {
  check<Hd256<Fp16, false, 1>>(vector_case(testing::vectors_dir(), "mha_full_hd256_s32"), 2, "mha_full_hd256_s32");
}

// Head dim 96: the 12-chunk swizzle and 48-column dK/dV slices (three ldmatrix pairs per warp).
TEST(StepBwdEmulated, Bf16Hd96CausalMqaMatchesTheRepoVectors) {
  check<Hd96<Bf16, true, 2>>(vector_case(testing::vectors_dir(), "mqa_causal_hd96_s48"), 2, "mqa_causal_hd96_s48");
}

TEST(StepBwdEmulated, Fp16Hd64CausalLargeLogitsMatchesTheRepoVectors) {
  check<Hd64<Fp16, true, 1>>(vector_case(testing::vectors_dir(), "mha_causal_hd64_s64_large_logits"), 2,
                             "mha_causal_hd64_s64_large_logits");
}

// The independent vectors (../shared/vectors or $CPGEN_VECTORS_DIR), where present.
#define CPGEN_INDEPENDENT_CASE(dir, name)                                                   \
  const std::string dir = independent_set_with(name);                                      \
  if (dir.empty()) GTEST_SKIP() << "no independent vectors set holds " << name << " (optional)"

TEST(StepBwdEmulated, Bf16Hd128CausalGqa4MatchesTheIndependentVectors) {
  CPGEN_INDEPENDENT_CASE(dir, "gqa4_causal_hd128_s128");
  check<Hd128<Bf16, true, 4>>(vector_case(dir, "gqa4_causal_hd128_s128"), 2, "gqa4_causal_hd128_s128");
}

TEST(StepBwdEmulated, Fp16Hd256FullGqa2MatchesTheIndependentVectors) {
  CPGEN_INDEPENDENT_CASE(dir, "gqa2_full_hd256_s64");
  check<Hd256<Fp16, false, 2>>(vector_case(dir, "gqa2_full_hd256_s64"), 2, "gqa2_full_hd256_s64");
}

TEST(StepBwdEmulated, Bf16Hd96CausalMqaMatchesTheIndependentVectors) {
  CPGEN_INDEPENDENT_CASE(dir, "mqa_causal_hd96_s96");
  check<Hd96<Bf16, true, 4>>(vector_case(dir, "mqa_causal_hd96_s96"), 2, "mqa_causal_hd96_s96");
}

TEST(StepBwdEmulated, Fp16Hd64CausalMatchesTheIndependentVectors) {
  CPGEN_INDEPENDENT_CASE(dir, "mha_causal_hd64_s128");
  check<Hd64<Fp16, true, 1>>(vector_case(dir, "mha_causal_hd64_s128"), 2, "mha_causal_hd64_s128");
}

// Striped positions (rank r holds r, r + N, ...): every causal key tile straddles the diagonal of
// every query tile, so the per-element mask runs everywhere and no query tile is skipped.
TEST(StepBwdEmulated, Bf16Hd64CausalGqa2StripedThreeSteps) {
  const BackwardCase c = random_case(1, 2, 1, 64, 3 * 30, true, 20);
  std::vector<std::vector<int>> ranks(3);
  for (int i = 0; i < c.p.seq_len; ++i) ranks[i % 3].push_back(i);
  RingResult run = run_backward<Hd64<Bf16, true, 2>>(c, ranks);
  ASSERT_TRUE(run.failure.empty()) << run.failure;
  const Errors e = errors_of(run.grads, c.expected);
  expect_gradients_within_limit(e, Dtype::kBf16);
}

// batch * kv_heads above the grid's y limit: the pairs fold over grid.y and grid.z. A fake limit of
// 2 folds 5 pairs into y 2 x z 3 (one idle block, which must return without touching anything) and
// 6 pairs into 2 x 3.
TEST(StepBwdEmulated, BatchKvHeadPairsFoldedOverGridYAndZ) {
  using Small = BwdTraits<Bf16, 64, 16, 16, 1, 1, true, 2>;
  for (int batch : {5, 3}) {
    const BackwardCase c = random_case(batch, batch == 5 ? 2 : 4, batch == 5 ? 1 : 2, 64, 2 * 2 * 8, true, 22);
    RingResult run = run_backward<Small>(c, split(c.p.seq_len, 2), 2);
    ASSERT_TRUE(run.failure.empty()) << run.failure;
    const Errors e = errors_of(run.grads, c.expected);
    expect_gradients_within_limit(e, Dtype::kBf16);
  }
}

// Accuracy does not grow with the ring: the same problem over 1 and 8 zigzag ranks, compared on
// the fp32 accumulators themselves (before the final rounding, which would hide a drift). What
// changes with N is only the order of fp32 sums (dQ over key tiles and steps, dK/dV around the
// ring) and which tiles are partial; P and dS are rounded to 16 bits per element the same way.
// A one-warp 16 x 16 tile config keeps the 64 emulated launches of the 8-rank ring cheap.
TEST(StepBwdEmulated, ErrorAtEightRanksIsWithinOnePointTwoOfOneRank) {
  using Small = BwdTraits<Bf16, 64, 16, 16, 1, 1, true, 2>;
  const BackwardCase c = random_case(1, 2, 1, 64, 2 * 8 * 8, true, 18);
  RingResult one = run_backward<Small>(c, split(c.p.seq_len, 1));
  RingResult eight = run_backward<Small>(c, split(c.p.seq_len, 8));
  ASSERT_TRUE(one.failure.empty()) << one.failure;
  ASSERT_TRUE(eight.failure.empty()) << eight.failure;
  const Errors e1 = errors_of(one.raw, c.expected), e8 = errors_of(eight.raw, c.expected);
  // Both are real bf16 errors, far from zero (a ratio of two zeros would prove nothing).
  EXPECT_GT(e1.dq, 1e-4);
  EXPECT_GT(e1.dk, 1e-4);
  EXPECT_GT(e1.dv, 1e-4);
  EXPECT_LE(e8.dq, 1.2 * e1.dq) << "N=1 " << e1.dq << ", N=8 " << e8.dq;
  EXPECT_LE(e8.dk, 1.2 * e1.dk) << "N=1 " << e1.dk << ", N=8 " << e8.dk;
  EXPECT_LE(e8.dv, 1.2 * e1.dv) << "N=1 " << e1.dv << ", N=8 " << e8.dv;
  RecordProperty("dq_error_n1", std::to_string(e1.dq));
  RecordProperty("dq_error_n8", std::to_string(e8.dq));
  std::printf("bwd error N=1 dq %.3e dk %.3e dv %.3e; N=8 dq %.3e dk %.3e dv %.3e\n", e1.dq, e1.dk, e1.dv,
              e8.dq, e8.dk, e8.dv);
}

// A row whose lse is -inf saw no key in the forward (its out is 0): it must get zero gradients and
// contribute nothing to dK/dV, with no NaN from exp(s - lse) = exp(+inf) or 0 * inf anywhere.
TEST(StepBwdEmulated, RowsWithMinusInfiniteLseGetZeroGradientsNotNaN) {
  BackwardCase c = random_case(1, 4, 1, 64, 2 * 2 * 12, true, 17);
  const int S = c.p.seq_len, D = c.p.head_dim;
  std::vector<size_t> blind_rows;
  for (int h : {1, 2})
    for (int i : {0, 3, 4, 30, 47}) blind_rows.push_back(static_cast<size_t>(h) * S + i);
  for (size_t row : blind_rows) {
    c.lse[row] = -std::numeric_limits<double>::infinity();
    for (int d = 0; d < D; ++d) c.out[row * D + d] = 0.0;
  }
  AttentionShape shape;
  shape.q_heads = 4;
  shape.kv_heads = 1;
  shape.head_dim = D;
  shape.scale = c.p.softmax_scale;
  shape.causal = true;
  const std::vector<int64_t> pos = all_positions(S);
  ReferenceGrads g = reference_backward(shape, c.p.q, c.p.k, c.p.v, c.out, c.dout, c.lse, pos, pos);
  c.expected = {g.dq, g.dk, g.dv};
  RingResult run = run_backward<Hd64<Bf16, true, 4>>(c, split(S, 2));
  ASSERT_TRUE(run.failure.empty()) << run.failure;
  for (size_t row : blind_rows)
    for (int d = 0; d < D; ++d) ASSERT_EQ(run.grads.dq[row * D + d], 0.0) << "dq row " << row << " d " << d;
  const Errors e = errors_of(run.grads, c.expected);
  expect_gradients_within_limit(e, Dtype::kBf16);
}

}  // namespace
}  // namespace cpgen
