// Host-side pieces of tuning a backward step, which need no GPU, so the CPU tests check them: the
// inputs a backward step kernel reads (q, k, v, dout, lse, delta), its launch params, float64
// gradients of single rows to check the reference config with, and the tolerances that decide
// whether a gradient is right.
//
// A backward step launch (templates/params_bwd.cuh) reads the forward's lse and the
// preprocessing kernel's delta = rowsum(dO * O) per query row; neither is recomputed by it. For
// tuning they are chosen, not derived from a forward run, since the kernel's work and timing do
// not depend on their values and a float64 forward over every row of a long step would take
// minutes: lse is ln(visible keys) (the log-sum-exp the row would have if every score were 0;
// the scores of these inputs have a standard deviation near 1/3, so each row's probabilities sum
// to about 1.06) and delta is rowsum(dout * out) of a random `out`. The float64 check uses the
// same lse and delta values, so it checks exactly what the kernel's contract says.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/workload.h"
#include "templates/params_bwd.cuh"
#include "tuner/step_inputs.h"

namespace cpgen {

struct BackwardStepInputs {
  WorkloadKey workload;
  StepPositions positions;
  double scale = 0;  // softmax scale, 1 / sqrt(head_dim)
  AttentionShape mask;  // step_mask(workload, positions): which pairs count, and the softcap
  // Values k/64, |k| <= 64, exact in both 16-bit types (encode_exact). q, dout and out are
  // [batch, q_heads, q_len, head_dim]; k and v [batch, kv_heads, kv_len, head_dim].
  std::vector<double> q, k, v, dout, out;
  std::vector<float> lse, delta;  // [batch, q_heads, q_len]; lse is -inf for a row with no key
};

// Deterministic inputs for w (the same seed gives the same values).
BackwardStepInputs backward_step_inputs(const WorkloadKey& w, uint64_t seed);

// Where a launch's tensors live (device addresses on a GPU); contiguous layouts as above, the
// accumulators dq_acc [batch, q_heads, q_len, head_dim] and dk_acc, dv_acc
// [batch, kv_heads, kv_len, head_dim] in fp32.
struct BackwardStepBuffers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* dout = nullptr;
  const float* lse = nullptr;
  const float* delta = nullptr;
  float* dq_acc = nullptr;
  float* dk_acc = nullptr;
  float* dv_acc = nullptr;
  const int* q_positions = nullptr;
  const int* kv_positions = nullptr;
  // step_key_intervals of the inputs' mask, for a workload whose mask needs key intervals.
  const int* q_key_first = nullptr;
  const int* q_key_last = nullptr;
};

// The params of one backward step launch of workload w on those buffers. accumulate_dkv: 0 for
// the chunk's first step (the kernel writes dk_acc and dv_acc), 1 to add to them.
RingBwdParams backward_step_params(const WorkloadKey& w, const BackwardStepBuffers& buffers, bool accumulate_dkv);

// One row of a gradient in float64 with, per column, the sum of the absolute values of the terms
// it adds up: the scale that the kernel's rounding errors grow with.
struct GradientRow {
  std::vector<double> value;
  std::vector<double> magnitude;
};

// With P_ij = exp(scale q_i.k_j - lse_i) over visible keys, dP_ij = dout_i.v_j and
// dS_ij = P_ij (dP_ij - delta_i):
//   dq_i = scale sum_j dS_ij k_j            (query row `row` of head h)
//   dk_j = scale sum_i dS_ij q_i            (key `key` of kv head kvh, summed over the query
//   dv_j = sum_i P_ij dout_i                 heads of its GQA group)
// A row whose lse is -inf contributes nothing.
GradientRow reference_dq_row(const BackwardStepInputs& in, int64_t b, int64_t h, int64_t row);
void reference_dkv_row(const BackwardStepInputs& in, int64_t b, int64_t kvh, int64_t key, GradientRow* dk,
                       GradientRow* dv);

// The most a kernel's fp32 gradient element may differ from float64, given its magnitude.
double gradient_tolerance(Dtype dtype, double magnitude);
// The most a candidate's element may differ from the reference config's `want`, where row_rms is
// the root mean square of want's row: gradient_agreement_relative(dtype) (|want| + row_rms).
double gradient_agreement_tolerance(Dtype dtype, double want, double row_rms);
double gradient_agreement_relative(Dtype dtype);
// The root mean square of the head_dim values at `row`, in float64.
double row_rms(const float* row, int head_dim);

// The first element (flat index) where `got` and `want` ([rows, head_dim] fp32) disagree beyond
// gradient_agreement_tolerance, NaN included; -1 when they agree everywhere. Sets *tolerance to
// that element's tolerance.
int64_t first_gradient_mismatch(const std::vector<float>& got, const std::vector<float>& want, int head_dim,
                                Dtype dtype, double* tolerance);

// FLOPs of one backward step launch that do useful work: 2.5 times the forward's 4 * head_dim per
// visible query-key pair (five matrix products instead of two), as FlashAttention counts them.
double backward_useful_flops(const WorkloadKey& w, const StepPositions& positions);

}  // namespace cpgen
