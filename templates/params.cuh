// Kernel parameters of the forward ring step: the contract between the host launcher
// (runtime/) and the step kernel (templates/step_fwd.cuh). Plain C layout, passed by value.
#pragma once

#ifndef __CUDACC_RTC__
#include <cstdint>
#endif

namespace cpgen {

// One launch computes attention of this rank's local queries against the K/V chunk it holds in
// this ring step and merges the result into the running state.
//
// Layouts are [batch, heads, rows, head_dim] with explicit element strides (the last dimension
// is contiguous). Position arrays hold global sequence positions in local order and must be
// strictly increasing (true of every partition scheme), so a tile's first and last entries bound
// it; causal masking compares them (key position > query position is masked).
//
// Query rows are packed per CTA: with GQA group G, packed row p of kv head h stands for query head
// h * G + p % G at local query index p / G, so each K/V tile is read once for the whole group.
//
// Running state, fp32, kept across ring steps ([batch, q_heads, state_len, head_dim] for the
// output and [batch, q_heads, state_len] for the rest, of which a launch uses q_len rows per head):
//   o_state:   sum_j exp2(s_j - m) * v_j          (unnormalized output)
//   m_state:   m = running max of s_j, where s_j = (q . k_j) * softmax_scale * log2(e)
//   l_state:   sum_j exp2(s_j - m)
// An empty row keeps m = -inf and l = 0; merging two empty sides never produces NaN.
// The last step writes out = o_state / l in the input dtype and lse = (m + log2 l) * ln 2 in
// natural log (-inf for a row with no key).
struct RingFwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;      // [batch, q_heads, state_len]
  float* o_state;
  float* m_state;
  float* l_state;
  const int* q_positions;   // [q_len]
  const int* kv_positions;  // [kv_len]

  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t out_batch_stride, out_head_stride, out_row_stride;

  int batch;
  int q_heads;
  int kv_heads;    // q_heads / kv_heads == the kernel's GQA group
  int q_len;       // local query rows per head
  int kv_len;      // keys in the held chunk
  // Rows per head of lse and the running state (their row pitch): the rank's local rows. A launch
  // over a view of the queries (the zigzag query-half step: q, out, positions, lse and the state
  // pointers start at its first row) has q_len < state_len. 0 means q_len (a launch over all rows).
  int state_len;
  float scale_log2;  // softmax_scale * log2(e)
  int is_first_step;  // 1: ignore the state in memory and start from empty
  int is_last_step;   // 1: also write out and lse
  // Mask features, read only by kernels specialized on them (generator/kernel_spec.h).
  // Key intervals: local query i sees exactly the keys whose global position lies in
  // [q_key_first[i], q_key_last[i]] (the mask model of runtime/core/attention_shape.h, causal
  // included). Both arrays are non-decreasing along the local queries (positions increase and
  // the interval ends are monotone in the position), so a block of queries is bounded by its
  // first and last rows' entries (mask.cuh). Every interval holds its own query's position.
  const int* q_key_first;   // [q_len]
  const int* q_key_last;    // [q_len]
  // Softcap c > 0: a visible pair's logit is c * tanh(softmax_scale * q.k / c).
  float softcap;
};

}  // namespace cpgen
