// An attention problem as a user states it (one entry of a shapes file).
#pragma once

#include <cstdint>
#include <string>

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

  int64_t gqa_group() const { return q_heads / kv_heads; }
  int64_t local_seq_len() const { return seq_len / cp_size; }
  double scale() const;      // softmax_scale, or 1/sqrt(head_dim) when it is 0
  // Throws Error(kBadInput) naming the first field that is not allowed and what is: sizes,
  // GQA grouping, the head dims and groups the kernels support, a scale that is finite and >= 0,
  // and a sequence the scheme can split over cp_size ranks.
  void validate() const;
};

}  // namespace cpgen
