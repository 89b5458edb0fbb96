// Host-side pieces of a tuning run that need no GPU, so the CPU tests check them: the global
// positions a workload's step sees, exact 16-bit float encoding, and the float64 reference rows
// that the reference config is checked against.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/workload.h"
#include "runtime/core/attention_shape.h"

namespace cpgen {

struct StepPositions {
  std::vector<int> q;   // global positions of the local query rows, increasing
  std::vector<int> kv;  // global positions of the keys held in this step, increasing
};

// A representative step of the workload's type (the mask pattern does not depend on cp_size
// beyond these, so a two-rank layout stands for any):
//   diagonal        rank 0's own positions under the scheme, queries and keys alike;
//   full            queries [L, 2L), keys [0, L): every key visible;
//   zigzag-kv-half  queries of rank 1 of 2 (chunks 1 and 2 of 4), keys chunk 0;
//   zigzag-q-half   queries chunk 3 (rank 0's second half), keys of rank 1 (chunks 1 and 2).
StepPositions step_positions(const WorkloadKey& w);

// The softcap a softcap workload is timed with. The key holds softcap on/off only, since the
// value is a kernel argument that costs the same whatever it is; it is chosen near the size of
// the backward timer's logits (inputs in [-1, 1], scale 1/sqrt(head_dim): |logit| about 0.3) so that the
// float64 check of the reference config tells a kernel that applies the cap from one that
// ignores it (at Gemma 2's 50 the cap would change no logit by more than rounding).
inline constexpr double kTuneSoftcap = 1.0;

// The mask of w's representative step in the mask model (runtime/core/attention_shape.h): causal
// or not, w's window sides, and for a documents workload documents of exactly
// w.mask.document_len tokens packed from position 0 over every position of pos (the last one
// shorter); kTuneSoftcap for a softcap workload; scale 1/sqrt(head_dim), as the backward timer
// uses (the forward timer's: forward_timing_mask below).
AttentionShape step_mask(const WorkloadKey& w, const StepPositions& pos);

// The forward timer's scores: scale kForwardLogitScale / sqrt(head_dim) in place of 1 / sqrt(head_dim).
// The grid's q.k has a variance of head_dim / 9, so the logits have a standard deviation of 4
// and a row's softmax is peaked, as a trained model's rows are: its output is of the values'
// size (rms 0.23 at 16K keys), not the near-average of thousands of them (rms 0.0045 with
// 1/sqrt(head_dim), under bf16's tolerance of 2^-6, so that a zero, shifted or wrong-head output
// passed the check: a reviewer's find). A softcap workload keeps step_mask's small logits and
// kTuneSoftcap: the GPU's tanh.approx.f32 errs by up to 2^-11 of a capped logit's size, which
// for logits near 8 comes close to fp16's tolerance, while the cap still moves the small logits
// by more than the check's tolerance. The backward keeps step_mask's too: its inputs stand for
// a forward of their own (lse = ln(visible keys)).
inline constexpr double kForwardLogitScale = 12.0;
AttentionShape forward_timing_mask(const WorkloadKey& w, const StepPositions& pos);

// What a key-intervals kernel reads for the step's local queries (params q_key_first and
// q_key_last): visible_keys(mask, pos.q[i]) with the ends clamped to int32 as the ring runtime
// clamps them (an unbounded side becomes 0 or INT32_MAX).
struct StepKeyIntervals {
  std::vector<int> first, last;  // [q_len]
};
StepKeyIntervals step_key_intervals(const AttentionShape& mask, const StepPositions& pos);

// Values k/64, |k| <= 64, are exact in bf16 and fp16 alike, so inputs need no rounding and the
// CPU reference sees exactly what the GPU does. Both go through runtime/core/half_convert.h;
// encode_exact throws kInternal for a value that conversion would have to round.
uint16_t encode_exact(double value, Dtype dtype);
double decode_16(uint16_t bits, Dtype dtype);

// `count` random values k/64, |k| <= 64, for the timing harness's inputs (a 32K step of Llama-3-8B
// takes 200 million): tensor `tensor_id` of `seed`, by the counter-based parallel draw of
// `cpgen verify --random` (runtime/ring/sampled_check.h grid_draw).
std::vector<double> grid_values(uint64_t seed, uint64_t tensor_id, size_t count);
// The timing inputs of a workload: tensor ids of the draws under timing_seed(w).
enum InputTensor : uint64_t { kInputQ = 0, kInputK = 1, kInputV = 2, kInputDout = 3, kInputOut = 4 };
uint64_t timing_seed(const WorkloadKey& w);
// Values first .. first + count - 1 of that tensor: the rows a check reads, without the rest.
std::vector<double> grid_values_at(uint64_t seed, uint64_t tensor_id, size_t first, size_t count);
// encode_exact of each of grid_values(seed, tensor_id, count), in dtype, drawn straight into 16 bits in
// parallel: what the GPU receives, without the 8-byte values (a gigabyte for the queries of a 32K
// step) or the per-value exactness check (each of the 129 possible values is checked once).
std::vector<uint16_t> grid_bits(uint64_t seed, uint64_t tensor_id, size_t count, Dtype dtype);

// Query-key pairs a launch computes usefully: for each query, the keys at or before it (all keys
// when not causal). Times 4 * head_dim * batch * q_heads gives the useful FLOPs.
int64_t visible_pairs(const StepPositions& pos, bool causal);
// The same under a full mask (window, documents): the keys of pos.kv inside each query's interval.
int64_t visible_pairs(const StepPositions& pos, const AttentionShape& mask);

// Float64 attention of one query row: out (head_dim) and lse (natural log) over the visible keys.
// q_row: head_dim values; k, v: [kv_len, head_dim] of the row's kv head.
void reference_row(const double* q_row, const double* k, const double* v, int64_t kv_len, int head_dim, double scale,
                   int q_position, const std::vector<int>& kv_positions, bool causal, double* out, double* lse);
// The same under the mask model: the keys visible_keys(mask, q_position) admits, logits by
// attention_logit (mask.scale, mask.softcap).
void reference_row(const double* q_row, const double* k, const double* v, int64_t kv_len, int head_dim,
                   const AttentionShape& mask, int q_position, const std::vector<int>& kv_positions, double* out,
                   double* lse);

}  // namespace cpgen
