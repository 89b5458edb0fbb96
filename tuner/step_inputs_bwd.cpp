#include "tuner/step_inputs_bwd.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "cpgen/error.h"
#include "runtime/core/half_convert.h"
#include "tuner/parallel_for.h"

namespace cpgen {
namespace {

double dot(const double* a, const double* b, int n) {
  double sum = 0;
  for (int d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

bool visible(const BackwardStepInputs& in, int64_t row, int64_t key) {
  return key_visible(in.mask, in.positions.q[row], in.positions.kv[key]);
}

}  // namespace

BackwardStepInputs backward_step_inputs(const WorkloadKey& w, uint64_t seed) {
  if (w.kv_heads <= 0 || w.q_heads % w.kv_heads != 0 || w.q_len <= 0 || w.kv_len <= 0) {
    throw Error(ErrorKind::kInternal, "backward_step_inputs: not a workload: " + w.describe());
  }
  BackwardStepInputs in;
  in.workload = w;
  in.positions = step_positions(w);
  in.scale = 1.0 / std::sqrt(static_cast<double>(w.head_dim));
  in.mask = step_mask(w, in.positions);
  const size_t q_elems = static_cast<size_t>(w.batch) * w.q_heads * w.q_len * w.head_dim;
  const size_t kv_elems = static_cast<size_t>(w.batch) * w.kv_heads * w.kv_len * w.head_dim;
  // Five tensors of the seed (step_inputs.h grid_values), drawn in parallel.
  in.q = grid_values(seed, kInputQ, q_elems);
  in.k = grid_values(seed, kInputK, kv_elems);
  in.v = grid_values(seed, kInputV, kv_elems);
  in.dout = grid_values(seed, kInputDout, q_elems);
  in.out = grid_values(seed, kInputOut, q_elems);
  // Visible keys per query row: the keys of the step inside the row's interval of the mask.
  std::vector<float> row_lse(w.q_len);
  for (int64_t i = 0; i < w.q_len; ++i) {
    const KeyInterval keys = visible_keys(in.mask, in.positions.q[i]);
    const auto begin = std::lower_bound(in.positions.kv.begin(), in.positions.kv.end(), keys.first);
    const int64_t n = std::upper_bound(begin, in.positions.kv.end(), keys.last) - begin;
    row_lse[i] = n > 0 ? static_cast<float>(std::log(static_cast<double>(n))) : -std::numeric_limits<float>::infinity();
  }
  const size_t rows = static_cast<size_t>(w.batch) * w.q_heads * w.q_len;
  in.lse.resize(rows);
  in.delta.resize(rows);
  for (size_t r = 0; r < rows; ++r) {
    in.lse[r] = row_lse[r % w.q_len];
    in.delta[r] = static_cast<float>(dot(&in.dout[r * w.head_dim], &in.out[r * w.head_dim], w.head_dim));
  }
  return in;
}

RingBwdParams backward_step_params(const WorkloadKey& w, const BackwardStepBuffers& buffers, bool accumulate_dkv) {
  const int64_t hd = w.head_dim;
  RingBwdParams p{};
  p.q = buffers.q;
  p.k = buffers.k;
  p.v = buffers.v;
  p.dout = buffers.dout;
  p.lse = buffers.lse;
  p.delta = buffers.delta;
  p.dq_acc = buffers.dq_acc;
  p.dk_acc = buffers.dk_acc;
  p.dv_acc = buffers.dv_acc;
  p.q_positions = buffers.q_positions;
  p.kv_positions = buffers.kv_positions;
  p.q_key_first = buffers.q_key_first;
  p.q_key_last = buffers.q_key_last;
  // The value step_mask gives a softcap workload (the reference uses the same), 0 otherwise.
  p.softcap = static_cast<float>(w.mask.softcap ? kTuneSoftcap : 0.0);
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.dout_row_stride = hd;
  p.q_head_stride = p.dout_head_stride = w.q_len * hd;
  p.k_head_stride = p.v_head_stride = w.kv_len * hd;
  p.q_batch_stride = p.dout_batch_stride = w.q_heads * w.q_len * hd;
  p.k_batch_stride = p.v_batch_stride = w.kv_heads * w.kv_len * hd;
  p.batch = w.batch;
  p.q_heads = w.q_heads;
  p.kv_heads = w.kv_heads;
  p.q_len = static_cast<int>(w.q_len);
  p.kv_len = static_cast<int>(w.kv_len);
  // The scale of BackwardStepInputs: 1 / sqrt(head_dim), the default of a problem.
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  p.scale = static_cast<float>(scale);
  p.scale_log2 = static_cast<float>(scale * M_LOG2E);
  p.accumulate_dkv = accumulate_dkv ? 1 : 0;
  return p;
}

GradientRow reference_dq_row(const BackwardStepInputs& in, int64_t b, int64_t h, int64_t row) {
  const WorkloadKey& w = in.workload;
  const int hd = w.head_dim;
  const int64_t kvh = h / w.gqa_group();
  const size_t row_index = (static_cast<size_t>(b) * w.q_heads + h) * w.q_len + row;
  const double* q = &in.q[row_index * hd];
  const double* dout = &in.dout[row_index * hd];
  const double lse = in.lse[row_index], delta = in.delta[row_index];
  GradientRow dq{std::vector<double>(hd, 0.0), std::vector<double>(hd, 0.0)};
  if (std::isinf(lse)) return dq;
  const size_t kv_base = (static_cast<size_t>(b) * w.kv_heads + kvh) * w.kv_len;
  for (int64_t j = 0; j < w.kv_len; ++j) {
    if (!visible(in, row, j)) continue;
    const double* k = &in.k[(kv_base + j) * hd];
    const double* v = &in.v[(kv_base + j) * hd];
    // t = logit of the pair; with a softcap dS carries dt/d(scale q.k) = logit_slope.
    const double t = attention_logit(in.mask, dot(q, k, hd));
    const double p = std::exp(t - lse);
    const double ds = p * (dot(dout, v, hd) - delta) * logit_slope(in.mask, t);
    for (int d = 0; d < hd; ++d) {
      const double term = in.scale * ds * k[d];
      dq.value[d] += term;
      dq.magnitude[d] += std::abs(term);
    }
  }
  return dq;
}

void reference_dkv_row(const BackwardStepInputs& in, int64_t b, int64_t kvh, int64_t key, GradientRow* dk,
                       GradientRow* dv) {
  const WorkloadKey& w = in.workload;
  const int hd = w.head_dim;
  const int group = w.gqa_group();
  const size_t kv_index = (static_cast<size_t>(b) * w.kv_heads + kvh) * w.kv_len + key;
  const double* k = &in.k[kv_index * hd];
  const double* v = &in.v[kv_index * hd];
  *dk = {std::vector<double>(hd, 0.0), std::vector<double>(hd, 0.0)};
  *dv = {std::vector<double>(hd, 0.0), std::vector<double>(hd, 0.0)};
  for (int g = 0; g < group; ++g) {
    const int64_t h = kvh * group + g;
    for (int64_t i = 0; i < w.q_len; ++i) {
      if (!visible(in, i, key)) continue;
      const size_t row_index = (static_cast<size_t>(b) * w.q_heads + h) * w.q_len + i;
      const double lse = in.lse[row_index];
      if (std::isinf(lse)) continue;
      const double* q = &in.q[row_index * hd];
      const double* dout = &in.dout[row_index * hd];
      const double t = attention_logit(in.mask, dot(q, k, hd));
      const double p = std::exp(t - lse);
      const double ds = p * (dot(dout, v, hd) - static_cast<double>(in.delta[row_index])) * logit_slope(in.mask, t);
      for (int d = 0; d < hd; ++d) {
        const double dv_term = p * dout[d], dk_term = in.scale * ds * q[d];
        dv->value[d] += dv_term;
        dv->magnitude[d] += std::abs(dv_term);
        dk->value[d] += dk_term;
        dk->magnitude[d] += std::abs(dk_term);
      }
    }
  }
}

double gradient_tolerance(Dtype dtype, double magnitude) {
  // The step kernel rounds P (for dV = P^T dO) and dS (for dK = dS^T Q and dQ = dS K) to the
  // input type before its matrix products, which moves each term by at most half an ulp
  // relative: u/2 of the magnitude. Inputs, lse and delta are exact, and P, dP and the sums are
  // fp32, whose errors are far below u. Four times the rounding bound leaves room for those. On
  // the emulated default kernel (tests/tuner/step_inputs_bwd_emulated_test.cpp, head dim 64,
  // GQA 4, the diagonal step) every element stays within 0.55 u of its magnitude in bf16 and
  // fp16; a query row that sees one key reaches 0.47 u, the rounding of its single dS.
  return 2 * ulp_at_one(dtype) * magnitude;
}

double gradient_agreement_tolerance(Dtype dtype, double want, double row_rms) {
  // Two correct configs round the same fp32 P and dS values and differ only in summation order,
  // so they agree far more closely than either agrees with float64. The row's rms stands for the
  // terms' size, which a kernel that drops, repeats or misplaces a tile is off by a sizable part
  // of; a near-zero element of a large row (terms cancelling) keeps the row's tolerance. Two
  // emulated configs (64x64 and 32x32 tiles) agree within u/4 of (|want| + row_rms), so 4 u keeps
  // a 16-fold margin, while a kernel ignoring the causal mask is far outside it.
  return gradient_agreement_relative(dtype) * (std::abs(want) + row_rms);
}

double gradient_agreement_relative(Dtype dtype) { return 4 * ulp_at_one(dtype); }

double row_rms(const float* row, int head_dim) {
  double squares = 0;
  for (int d = 0; d < head_dim; ++d) squares += static_cast<double>(row[d]) * row[d];
  return std::sqrt(squares / head_dim);
}

int64_t first_gradient_mismatch(const std::vector<float>& got, const std::vector<float>& want, int head_dim,
                                Dtype dtype, double* tolerance) {
  if (got.size() != want.size() || head_dim <= 0 || want.size() % head_dim != 0) {
    throw Error(ErrorKind::kInternal, "first_gradient_mismatch: " + std::to_string(got.size()) + " against " +
                                          std::to_string(want.size()) + " elements of rows of " + std::to_string(head_dim));
  }
  const int64_t rows = static_cast<int64_t>(want.size()) / head_dim;
  std::atomic<int64_t> first{static_cast<int64_t>(want.size())};
  parallel_ranges(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end && r * head_dim < first.load(); ++r) {
      const size_t base = static_cast<size_t>(r) * head_dim;
      const double rms = row_rms(want.data() + base, head_dim);
      for (int d = 0; d < head_dim; ++d) {
        const double g = got[base + d], x = want[base + d];
        // Written as a negation so that a NaN on either side (a poisoned, unwritten element) fails.
        if (!(std::abs(g - x) <= gradient_agreement_tolerance(dtype, x, rms))) {
          int64_t seen = first.load();
          const int64_t at = static_cast<int64_t>(base + d);
          while (at < seen && !first.compare_exchange_weak(seen, at)) {
          }
          return;
        }
      }
    }
  });
  const int64_t at = first.load();
  if (at >= static_cast<int64_t>(want.size())) return -1;
  if (tolerance) *tolerance = gradient_agreement_tolerance(dtype, want[at], row_rms(want.data() + at / head_dim * head_dim, head_dim));
  return at;
}

double backward_useful_flops(const WorkloadKey& w, const StepPositions& positions) {
  return 2.5 * 4.0 * static_cast<double>(visible_pairs(positions, step_mask(w, positions))) * w.head_dim * w.batch * w.q_heads;
}

}  // namespace cpgen
