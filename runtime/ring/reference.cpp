#include "runtime/ring/reference.h"

#include <cmath>
#include <limits>
#include <string>

#include "cpgen/error.h"

namespace cpgen {

void check_attention_shape(const AttentionShape& s) {
  if (s.batch < 1) throw_bad_input("attention: batch must be >= 1; got " + std::to_string(s.batch));
  if (s.head_dim < 1)
    throw_bad_input("attention: head_dim must be >= 1; got " + std::to_string(s.head_dim));
  if (s.q_heads < 1 || s.kv_heads < 1 || s.q_heads % s.kv_heads != 0)
    throw_bad_input("attention: q_heads (" + std::to_string(s.q_heads) +
                    ") must be a positive multiple of kv_heads (" + std::to_string(s.kv_heads) +
                    ")");
  if (!(s.scale > 0) || !std::isfinite(s.scale))
    throw_bad_input("attention: softmax scale must be a positive finite number; got " +
                    std::to_string(s.scale));
  if (s.window_left < -1)
    throw_bad_input("attention: window_left must be >= 0, or -1 for unbounded; got " +
                    std::to_string(s.window_left));
  if (s.window_right < -1)
    throw_bad_input("attention: window_right must be >= 0, or -1 for unbounded; got " +
                    std::to_string(s.window_right));
  if (!std::isfinite(s.softcap) || s.softcap < 0)
    throw_bad_input("attention: softcap must be finite and >= 0 (0: none); got " +
                    std::to_string(s.softcap));
  if (s.cu_seqlens.size() == 1 || (!s.cu_seqlens.empty() && s.cu_seqlens.front() != 0))
    throw_bad_input("attention: cu_seqlens must be empty or start at 0 and hold at least two "
                    "boundaries");
  for (size_t i = 1; i < s.cu_seqlens.size(); ++i)
    if (s.cu_seqlens[i] < s.cu_seqlens[i - 1])
      throw_bad_input("attention: cu_seqlens must not decrease; entry " + std::to_string(i) + " is " +
                      std::to_string(s.cu_seqlens[i]) + " after " +
                      std::to_string(s.cu_seqlens[i - 1]));
}

namespace {

struct Dims {
  int64_t q_len, kv_len, d, group;
};

Dims check_inputs(const AttentionShape& s, size_t q, size_t k, size_t v, size_t q_len,
                  size_t kv_len) {
  check_attention_shape(s);
  const Dims dims{static_cast<int64_t>(q_len), static_cast<int64_t>(kv_len), s.head_dim,
                  s.group()};
  const auto expect = [](const char* name, size_t got, int64_t want) {
    if (static_cast<int64_t>(got) != want)
      throw_bad_input(std::string("attention: ") + name + " has " + std::to_string(got) +
                      " elements; the shape needs " + std::to_string(want));
  };
  expect("q", q, s.batch * s.q_heads * dims.q_len * dims.d);
  expect("k", k, s.batch * s.kv_heads * dims.kv_len * dims.d);
  expect("v", v, s.batch * s.kv_heads * dims.kv_len * dims.d);
  return dims;
}

double dot(const double* a, const double* b, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

ReferenceForward reference_forward(const AttentionShape& s, const std::vector<double>& q,
                                   const std::vector<double>& k, const std::vector<double>& v,
                                   const std::vector<int64_t>& q_positions,
                                   const std::vector<int64_t>& kv_positions) {
  const Dims n = check_inputs(s, q.size(), k.size(), v.size(), q_positions.size(),
                              kv_positions.size());
  ReferenceForward r;
  r.out.assign(q.size(), 0.0);
  r.lse.assign(static_cast<size_t>(s.batch * s.q_heads * n.q_len), 0.0);
  std::vector<double> scores(static_cast<size_t>(n.kv_len));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t kvh = b * s.kv_heads + h / n.group;
      const double* k_head = k.data() + kvh * n.kv_len * n.d;
      const double* v_head = v.data() + kvh * n.kv_len * n.d;
      for (int64_t i = 0; i < n.q_len; ++i) {
        const int64_t row = (b * s.q_heads + h) * n.q_len + i;
        const double* q_row = q.data() + row * n.d;
        double max_score = -std::numeric_limits<double>::infinity();
        const KeyInterval keys = visible_keys(s, q_positions[i]);
        for (int64_t j = 0; j < n.kv_len; ++j) {
          scores[j] = keys.contains(kv_positions[j])
                          ? attention_logit(s, dot(q_row, k_head + j * n.d, n.d))
                          : -std::numeric_limits<double>::infinity();
          max_score = std::max(max_score, scores[j]);
        }
        if (max_score == -std::numeric_limits<double>::infinity()) {
          r.lse[row] = max_score;  // no visible key: output 0, lse -inf
          continue;
        }
        // softmax_j = exp(s_j - m) / sum_j exp(s_j - m); lse = m + log(sum_j exp(s_j - m)).
        double denominator = 0;
        double* out_row = r.out.data() + row * n.d;
        for (int64_t j = 0; j < n.kv_len; ++j) {
          if (scores[j] == -std::numeric_limits<double>::infinity()) continue;
          const double p = std::exp(scores[j] - max_score);
          denominator += p;
          for (int64_t d = 0; d < n.d; ++d) out_row[d] += p * v_head[j * n.d + d];
        }
        for (int64_t d = 0; d < n.d; ++d) out_row[d] /= denominator;
        r.lse[row] = max_score + std::log(denominator);
      }
    }
  return r;
}

ReferenceGrads reference_backward(const AttentionShape& s, const std::vector<double>& q,
                                  const std::vector<double>& k, const std::vector<double>& v,
                                  const std::vector<double>& out,
                                  const std::vector<double>& dout,
                                  const std::vector<double>& lse,
                                  const std::vector<int64_t>& q_positions,
                                  const std::vector<int64_t>& kv_positions) {
  const Dims n = check_inputs(s, q.size(), k.size(), v.size(), q_positions.size(),
                              kv_positions.size());
  if (out.size() != q.size() || dout.size() != q.size())
    throw_bad_input("attention backward: out and dout must have as many elements as q (" +
                    std::to_string(q.size()) + "); got " + std::to_string(out.size()) + " and " +
                    std::to_string(dout.size()));
  if (static_cast<int64_t>(lse.size()) != s.batch * s.q_heads * n.q_len)
    throw_bad_input("attention backward: lse has " + std::to_string(lse.size()) +
                    " elements; expected " + std::to_string(s.batch * s.q_heads * n.q_len));
  ReferenceGrads g;
  g.dq.assign(q.size(), 0.0);
  g.dk.assign(k.size(), 0.0);
  g.dv.assign(v.size(), 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t kvh = b * s.kv_heads + h / n.group;
      const double* k_head = k.data() + kvh * n.kv_len * n.d;
      const double* v_head = v.data() + kvh * n.kv_len * n.d;
      double* dk_head = g.dk.data() + kvh * n.kv_len * n.d;
      double* dv_head = g.dv.data() + kvh * n.kv_len * n.d;
      for (int64_t i = 0; i < n.q_len; ++i) {
        const int64_t row = (b * s.q_heads + h) * n.q_len + i;
        if (lse[row] == -std::numeric_limits<double>::infinity()) continue;  // no key: no grad
        const double* q_row = q.data() + row * n.d;
        const double* do_row = dout.data() + row * n.d;
        double* dq_row = g.dq.data() + row * n.d;
        // With P = softmax(T) and dP = dO V^T: dT = P o (dP - D), D_i = sum_j P_ij dP_ij
        // = dO_i . O_i. The logit T = f(scale Q K^T) with f the identity or the softcap, so
        // dS = dT o f' (f' = 1 - (T / c)^2 under a softcap c). Then dQ = scale dS K,
        // dK = scale dS^T Q, dV = P^T dO.
        const double d_row = dot(do_row, out.data() + row * n.d, n.d);
        const KeyInterval keys = visible_keys(s, q_positions[i]);
        for (int64_t j = 0; j < n.kv_len; ++j) {
          if (!keys.contains(kv_positions[j])) continue;
          const double* k_row = k_head + j * n.d;
          const double logit = attention_logit(s, dot(q_row, k_row, n.d));
          const double p = std::exp(logit - lse[row]);
          const double dp = dot(do_row, v_head + j * n.d, n.d);
          const double ds = p * (dp - d_row) * logit_slope(s, logit);
          for (int64_t d = 0; d < n.d; ++d) {
            dq_row[d] += s.scale * ds * k_row[d];
            dk_head[j * n.d + d] += s.scale * ds * q_row[d];
            dv_head[j * n.d + d] += p * do_row[d];
          }
        }
      }
    }
  return g;
}

}  // namespace cpgen
