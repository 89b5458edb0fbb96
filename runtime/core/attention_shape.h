// The shape and mask of one attention computation, as the CPU reference and the CPU ring
// backend see it. Tensors are row-major [batch, heads, rows, head_dim]; which rows a tensor
// holds is given separately as global positions, so the same code serves full sequences and
// per-rank shards.
//
// The mask model (issue 11): every mask is, for the query at packed position i, one contiguous
// interval of visible key positions
//   [max(doc_start(i), i - left), min(doc_end(i) - 1, i + right)],   right = 0 when causal,
// where the document bounds come from cu_seqlens (the same packing in every batch entry) and a
// window side of -1 is unbounded (FlashAttention's window_size). Causal, sliding windows and
// packed documents are all this one interval, so one function decides visibility everywhere.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpgen/problem.h"

namespace cpgen {

struct AttentionShape {
  int64_t batch = 1;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;   // query head h reads kv head h / (q_heads / kv_heads)
  int64_t head_dim = 0;
  double scale = 0;       // softmax scale applied to q . k
  bool causal = false;    // mask keys after the query: k_pos > q_pos
  int64_t window_left = -1;   // >= 0: mask keys more than this far behind (q_pos - k_pos > left)
  int64_t window_right = -1;  // >= 0: mask keys more than this far ahead; causal acts as 0
  double softcap = 0;         // > 0: the score is softcap * tanh(scale * q.k / softcap)
  // Document boundaries in the packed sequence: 0 = cu_seqlens[0] <= ... <= cu_seqlens[D] =
  // seq_len. Empty: the whole sequence is one document.
  std::vector<int64_t> cu_seqlens;

  int64_t group() const { return q_heads / kv_heads; }
};

// Document boundaries from document lengths: {0, l0, l0 + l1, ...}; empty stays empty.
inline std::vector<int64_t> cu_seqlens_of(const std::vector<int64_t>& documents) {
  std::vector<int64_t> bounds;
  if (documents.empty()) return bounds;
  bounds.push_back(0);
  for (int64_t length : documents) bounds.push_back(bounds.back() + length);
  return bounds;
}

// The shape and mask of a (validated) problem.
inline AttentionShape attention_shape_of(const Problem& p) {
  AttentionShape s;
  s.batch = p.batch;
  s.q_heads = p.q_heads;
  s.kv_heads = p.kv_heads;
  s.head_dim = p.head_dim;
  s.scale = p.scale();
  s.causal = p.causal;
  s.window_left = p.window_left;
  s.window_right = p.window_right;
  s.softcap = p.softcap;
  s.cu_seqlens = cu_seqlens_of(p.documents);
  return s;
}

// Throws Error(kBadInput) naming the field when the shape cannot be computed.
void check_attention_shape(const AttentionShape& shape);

// The keys query position q_pos sees: [first, last], empty when first > last.
struct KeyInterval {
  int64_t first = 0;
  int64_t last = -1;
  bool contains(int64_t k_pos) const { return first <= k_pos && k_pos <= last; }
  bool empty() const { return first > last; }
};

// The keys a query at q_pos sees within the keys [doc_first, doc_last] of its document: the window
// and the causal bound applied (visible_keys, for a caller that walks the documents itself).
inline KeyInterval visible_keys_in_document(const AttentionShape& shape, int64_t q_pos, int64_t doc_first,
                                            int64_t doc_last) {
  KeyInterval keys{doc_first, doc_last};
  if (shape.window_left >= 0) keys.first = std::max(keys.first, q_pos - shape.window_left);
  const int64_t right = shape.causal ? 0 : shape.window_right;
  if (right >= 0) keys.last = std::min(keys.last, q_pos + right);
  return keys;
}

inline KeyInterval visible_keys(const AttentionShape& shape, int64_t q_pos) {
  if (shape.cu_seqlens.size() < 2) return visible_keys_in_document(shape, q_pos, 0, std::numeric_limits<int64_t>::max());
  // The document holding q_pos starts at the last boundary <= q_pos; zero-length documents
  // share a boundary with the next one and are passed over by upper_bound.
  const auto next = std::upper_bound(shape.cu_seqlens.begin(), shape.cu_seqlens.end(), q_pos);
  if (next == shape.cu_seqlens.begin() || next == shape.cu_seqlens.end()) return {0, -1};
  return visible_keys_in_document(shape, q_pos, *(next - 1), *next - 1);
}

// Whether query position q_pos attends to key position k_pos.
inline bool key_visible(const AttentionShape& shape, int64_t q_pos, int64_t k_pos) {
  return visible_keys(shape, q_pos).contains(k_pos);
}

// The logit a visible pair enters the softmax with, from its raw q . k: scale * q.k, or with a
// softcap c, c * tanh(scale * q.k / c), which bounds every logit to (-c, c) (Gemma 2).
inline double attention_logit(const AttentionShape& shape, double q_dot_k) {
  const double scaled = shape.scale * q_dot_k;
  return shape.softcap > 0 ? shape.softcap * std::tanh(scaled / shape.softcap) : scaled;
}

// d logit / d (scale * q.k) at a logit t: 1, or with a softcap c, 1 - tanh^2 = 1 - (t / c)^2.
inline double logit_slope(const AttentionShape& shape, double logit) {
  if (!(shape.softcap > 0)) return 1.0;
  const double t = logit / shape.softcap;
  return 1.0 - t * t;
}

}  // namespace cpgen
