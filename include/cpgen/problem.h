// An attention problem as a user states it (one entry of a shapes file).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cpgen/types.h"

namespace cpgen {

struct Problem {
  std::string name;          // free text; used in messages and reports
  int64_t batch = 1;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;      // q_heads % kv_heads == 0; gqa group = q_heads / kv_heads
  int64_t head_dim = 0;
  int64_t seq_len = 0;       // the whole sequence, over all ranks
  int64_t cp_size = 1;       // context-parallel ranks
  Dtype dtype = Dtype::kBf16;
  bool causal = true;
  Scheme scheme = Scheme::kZigzag;
  double softmax_scale = 0;  // 0 means 1/sqrt(head_dim)
  // The mask model (runtime/core/attention_shape.h): query i sees the keys
  // [max(doc_start(i), i - window_left), min(doc_end(i) - 1, i + window_right)], with
  // window_right = 0 when causal.
  // Lengths of the documents packed, in order, into the sequence of every batch entry; they sum
  // to seq_len and may be 0 or 1. Empty: the whole sequence is one document.
  std::vector<int64_t> documents;
  int64_t window_left = -1;   // FlashAttention's window_size; -1: unbounded
  int64_t window_right = -1;
  double softcap = 0;         // > 0: logits are softcap * tanh(scale * q.k / softcap); 0: none
  // The tensor layout the user's framework hands over: "bhsd" (empty means it), "bshd", "sbhd",
  // or packed "thd" (batch 1): the stride presets of layout_strides below. The kernels read every
  // layout in place through strides; a caller with other strides passes ShardStrides.
  std::string layout;

  // q_heads / kv_heads; 0 while kv_heads is not set (a division by zero before).
  int64_t gqa_group() const { return kv_heads > 0 ? q_heads / kv_heads : 0; }
  // seq_len / cp_size: a rank's rows when the split is even. Ranks may hold different counts
  // (documents, lengths that do not divide): RingAttention::local_rows(rank) says each one's.
  int64_t local_seq_len() const { return cp_size > 0 ? seq_len / cp_size : 0; }
  double scale() const;      // softmax_scale, or 1/sqrt(head_dim) when it is 0
  // Whether a sliding window bounds the keys beyond causal / full. A causal problem's
  // window_right alone is none: causal already ends every row's keys at its own position.
  bool has_window() const { return window_left >= 0 || (!causal && window_right >= 0); }
  // Whether the problem uses a feature beyond a plain causal / full bhsd problem (documents, a
  // window, a softcap, another layout).
  bool has_mask_features() const {
    return documents.size() > 1 || has_window() || softcap > 0 || (!layout.empty() && layout != "bhsd");
  }
  // Throws Error(kBadInput) naming the first field that is not allowed and what is: sizes,
  // GQA grouping, the head dims and groups the kernels support, a scale that is finite and >= 0,
  // documents that sum to seq_len, windows >= -1 and a softcap that is finite and >= 0. Any
  // seq_len splits over any cp_size (runtime/ring/partition.h); what the kernels need beyond
  // that is check_kernel_ring_problem's (runtime/ring/kernel_support.h).
  void validate() const;
};

// Element strides of one [batch, heads, rows, head_dim] tensor of a rank's shard (rows: the
// rank's local rows). head_dim is contiguous; the kernels move rows as 16-byte pieces, so every
// stride is a multiple of 8 elements.
struct TensorStrides {
  int64_t batch = 0, head = 0, row = 0;
  bool operator==(const TensorStrides&) const = default;
};

// The strides of every tensor of one rank's call. q, out, dout and dq have q_heads heads; k, v,
// dk and dv kv_heads. The forward reads q, k, v, out; the backward all of them. (lse, and the
// backward's lse, stay contiguous [batch, q_heads, rows] fp32.)
struct ShardStrides {
  TensorStrides q, k, v, out, dout, dq, dk, dv;
};

// The strides the named layout gives a tensor of `heads` heads and `rows` rows of one rank:
//   bhsd (or ""): [batch, heads, rows, head_dim]   bshd: [batch, rows, heads, head_dim]
//   sbhd: [rows, batch, heads, head_dim]           thd: [rows, heads, head_dim] (batch 1; as bshd)
// Throws Error(kBadInput) naming an unknown layout and the allowed ones.
TensorStrides layout_strides(const std::string& layout, int64_t batch, int64_t heads, int64_t rows,
                             int64_t head_dim);
// Every tensor of a rank holding `rows` rows, in the problem's layout.
ShardStrides layout_shard_strides(const Problem& problem, int64_t rows);

}  // namespace cpgen
