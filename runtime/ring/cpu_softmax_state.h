// The per-row online-softmax state of the ring forward, on the CPU, with the semantics of the
// GPU step kernel (templates/params.cuh): fp32, log2 domain.
//
// For the keys seen so far, with scores s_j = (q . k_j) * softmax_scale * log2(e):
//   m = max_j s_j                      (-inf while no key has been seen)
//   l = sum_j exp2(s_j - m)            (0 while empty)
//   o = sum_j exp2(s_j - m) * v_j      (unnormalized output; 0 while empty)
// Two states over disjoint key sets merge exactly: with m = max(m_a, m_b),
//   l = exp2(m_a - m) l_a + exp2(m_b - m) l_b,   o = exp2(m_a - m) o_a + exp2(m_b - m) o_b.
// When both sides are empty m = -inf and m_a - m would be -inf - (-inf) = NaN, so an empty result
// short-circuits; when only one side is empty its factor is exp2(-inf) = 0, which is exact.
// Finally out = o / l and lse = (m + log2 l) * ln 2 (natural log; -inf and out = 0 for a row
// that saw no key).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace cpgen::cpu {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
inline constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// Merges the state (m_b, l_b, o_b[0..dim)) into (m_a, l_a, o_a[0..dim)).
inline void merge_softmax_state(float& m_a, float& l_a, float* o_a, float m_b, float l_b,
                                const float* o_b, int64_t dim) {
  const float m = std::fmax(m_a, m_b);
  if (m == kMinusInf) return;  // both sides empty: stay empty, never NaN
  const float scale_a = std::exp2(m_a - m);  // 0 when side a is empty
  const float scale_b = std::exp2(m_b - m);
  for (int64_t d = 0; d < dim; ++d) o_a[d] = scale_a * o_a[d] + scale_b * o_b[d];
  l_a = scale_a * l_a + scale_b * l_b;
  m_a = m;
}

// Writes out[0..dim) and returns the natural-log LSE of a finished row.
inline float finish_softmax_state(float m, float l, const float* o, float* out, int64_t dim) {
  if (!(l > 0)) {
    for (int64_t d = 0; d < dim; ++d) out[d] = 0;
    return kMinusInf;
  }
  const float inv_l = 1.0f / l;
  for (int64_t d = 0; d < dim; ++d) out[d] = o[d] * inv_l;
  return (m + std::log2(l)) * kLn2;
}

}  // namespace cpgen::cpu
