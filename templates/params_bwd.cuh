// Kernel parameters of the backward ring: the preprocessing kernel (step_bwd_pre.cuh) and the
// backward step kernel (step_bwd.cuh). Plain C layout, passed by value; layouts and position
// conventions as in params.cuh.
#pragma once

#ifndef __CUDACC_RTC__
#include <cstdint>
#endif

namespace cpgen {

// Once per backward, before the first step, on this rank's queries:
//   delta[row] = sum_d dout[row][d] * out[row][d]   (fp32; out is the forward's output, input dtype)
//   dq_acc[row][:] = 0                               (the step kernels add into it atomically)
// Rows are [batch, q_heads, q_len] in that order; delta and dq_acc are contiguous.
struct RingBwdPreParams {
  const void* out;
  const void* dout;
  float* delta;    // [batch, q_heads, q_len]
  float* dq_acc;   // [batch, q_heads, q_len, head_dim]
  int64_t out_batch_stride, out_head_stride, out_row_stride;
  int64_t dout_batch_stride, dout_head_stride, dout_row_stride;
  int batch;
  int q_heads;
  int q_len;
};

// One backward ring step: this rank's queries against the K/V chunk it holds in this step.
// With P = exp(q . k * softmax_scale - lse) recomputed from the forward's lse (natural log, -inf
// for a row that saw no key: such a row gets no gradient), dP = dO V^T and dS = P (dP - delta):
//   dq_acc += softmax_scale * dS K      fp32, accumulated over all steps (red.global.add)
//   dk_acc (+)= softmax_scale * dS^T Q  fp32, the accumulator of the held chunk, which travels the
//   dv_acc (+)= P^T dO                  ring with it and reaches the chunk's owner after N steps
// dk_acc and dv_acc are written (accumulate_dkv = 0, the chunk's first step) or added to.
// Packed GQA rows as in params.cuh: the kv head's dK/dV sum over its group's query heads.
struct RingBwdParams {
  const void* q;
  const void* k;
  const void* v;
  const void* dout;
  const float* lse;     // [batch, q_heads, state_len], natural log
  const float* delta;   // [batch, q_heads, state_len], from the preprocessing kernel
  float* dq_acc;        // [batch, q_heads, state_len, head_dim]
  float* dk_acc;        // [batch, kv_heads, kv_len, head_dim]
  float* dv_acc;        // [batch, kv_heads, kv_len, head_dim]
  const int* q_positions;   // [q_len]
  const int* kv_positions;  // [kv_len]

  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t dout_batch_stride, dout_head_stride, dout_row_stride;

  int batch;
  int q_heads;
  int kv_heads;
  int q_len;
  int kv_len;
  // Rows per head of lse, delta and dq_acc (their row pitch): the rank's local rows; q_len is
  // smaller for a launch over a view of the queries, whose pointers start at its first row.
  // 0 means q_len (a launch over all rows).
  int state_len;
  float scale;          // softmax_scale
  float scale_log2;     // softmax_scale * log2(e)
  int accumulate_dkv;   // 0: write dk_acc/dv_acc; 1: add to them
  // As in RingFwdParams. With a softcap the recomputed P uses the capped logit t, and dS gains
  // the factor dt/d(scale q.k) = 1 - (t / c)^2.
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

// Once per backward, after the last step, for each of dQ, dK and dV:
//   grad[row][:] = acc[row][:] rounded to the input dtype (nearest even)
// acc is the fp32 accumulator (contiguous [batch, heads, len, head_dim], already scaled by the
// step kernels); grad is the caller's tensor with the strides below (elements, input dtype).
// heads is q_heads for dQ and kv_heads for dK and dV.
struct RingBwdConvertParams {
  const float* acc;
  void* grad;
  int64_t grad_batch_stride, grad_head_stride, grad_row_stride;
  int batch;
  int heads;
  int len;
};

}  // namespace cpgen
