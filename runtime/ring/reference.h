// Float64 reference attention on the CPU: the yardstick for the ring, the CPU backend and the GPU
// kernels. Exact softmax per row (no online merging), accumulated in double.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/core/attention_shape.h"

namespace cpgen {

struct ReferenceForward {
  std::vector<double> out;  // [batch, q_heads, q_len, head_dim]
  std::vector<double> lse;  // [batch, q_heads, q_len], natural log; -inf for a row with no key
};

struct ReferenceGrads {
  std::vector<double> dq;  // [batch, q_heads, q_len, head_dim]
  std::vector<double> dk;  // [batch, kv_heads, kv_len, head_dim]
  std::vector<double> dv;
};

// q: [batch, q_heads, q_len, head_dim], k and v: [batch, kv_heads, kv_len, head_dim], with
// q_len = q_positions.size() and kv_len = kv_positions.size() (global positions for masking).
ReferenceForward reference_forward(const AttentionShape& shape, const std::vector<double>& q,
                                   const std::vector<double>& k, const std::vector<double>& v,
                                   const std::vector<int64_t>& q_positions,
                                   const std::vector<int64_t>& kv_positions);

// Gradients of loss = sum(out * dout), with probabilities recomputed from the saved lse.
ReferenceGrads reference_backward(const AttentionShape& shape, const std::vector<double>& q,
                                  const std::vector<double>& k, const std::vector<double>& v,
                                  const std::vector<double>& out,
                                  const std::vector<double>& dout,
                                  const std::vector<double>& lse,
                                  const std::vector<int64_t>& q_positions,
                                  const std::vector<int64_t>& kv_positions);

}  // namespace cpgen
