// The shape and mask of one attention computation, as the CPU reference and the CPU ring
// backend see it. Tensors are row-major [batch, heads, rows, head_dim]; which rows a tensor
// holds is given separately as global positions, so the same code serves full sequences and
// per-rank shards.
#pragma once

#include <cstdint>

namespace cpgen {

struct AttentionShape {
  int64_t batch = 1;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;   // query head h reads kv head h / (q_heads / kv_heads)
  int64_t head_dim = 0;
  double scale = 0;       // softmax scale applied to q . k
  bool causal = false;    // mask keys after the query: k_pos > q_pos
  int64_t window = 0;     // > 0: also mask keys window or more behind: q_pos - k_pos >= window

  int64_t group() const { return q_heads / kv_heads; }
};

// Throws Error(kBadInput) naming the field when the shape cannot be computed.
void check_attention_shape(const AttentionShape& shape);

// Whether query position q_pos attends to key position k_pos.
inline bool key_visible(const AttentionShape& shape, int64_t q_pos, int64_t k_pos) {
  if (shape.causal && k_pos > q_pos) return false;
  if (shape.window > 0 && q_pos - k_pos >= shape.window) return false;
  return true;
}

}  // namespace cpgen
