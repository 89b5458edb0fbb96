// Host side of the forward step kernel's GPU tests: float64 reference attention, 16-bit
// conversions, and a driver that runs the generated kernel over the steps of a ring on one GPU
// (each rank's queries against every rank's K/V chunk in ring order, state carried between
// steps), with poisoned outputs and padded rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "generator/kernel_spec.h"
#include "templates/params.cuh"

namespace cpgen::testing {

// A whole-sequence attention problem, tensors [batch][heads][seq][head_dim] row-major in float64
// (values exactly representable in bf16 and fp16).
struct AttentionProblem {
  int batch = 1, q_heads = 1, kv_heads = 1, head_dim = 64, seq_len = 0;
  bool causal = true;
  double softmax_scale = 0.125;
  std::vector<double> q, k, v;
};

struct AttentionOutput {
  std::vector<double> out;  // [batch][q_heads][seq][head_dim]
  std::vector<double> lse;  // [batch][q_heads][seq], natural log
};

// Random problem on a grid of 1/32 in [-4, 4] (exact in bf16 and fp16).
AttentionProblem random_problem(int batch, int q_heads, int kv_heads, int head_dim, int seq_len,
                                bool causal, uint32_t seed);
// Makes every query's scores climb along the key positions: q's first column becomes 4 and k's
// first column at position j becomes j / keys_per_unit (an integer, exact in both 16-bit types
// while it stays below 256). Rows then meet larger maxima tile after tile, so the kernels' running
// max keeps moving past its lag (softmax.cuh, kMaxLag) and the O rescale runs inside the loop,
// which random scores of a few units reach only at the first tile.
void make_scores_climb(AttentionProblem& p, int keys_per_unit);
// Loads a vectors case (format cpgen-attention-vectors/1); `expected` gets its out and lse.
AttentionProblem load_vector_case(const std::string& path, AttentionOutput* expected);
AttentionOutput reference_attention(const AttentionProblem& p);

uint16_t to_bits(double value, Dtype dtype);  // round to nearest even
double from_bits(uint16_t bits, Dtype dtype);

// Zigzag positions of every rank: 2N equal chunks, rank r holds chunk r then chunk 2N-1-r.
std::vector<std::vector<int>> zigzag_split(int seq_len, int cp_size);

struct RingRun {
  AttentionOutput result;  // entries of positions no rank holds stay NaN
  std::string failure;     // non-empty when the kernel wrote outside its outputs or left NaN/inf
  int launches = 0;
};

// Runs `spec` on GPU 0 for every rank of `ranks` (each a strictly increasing position list):
// step s of rank r attends to the chunk of rank (r - s) mod N.
RingRun run_ring_on_gpu(const AttentionProblem& p, const KernelSpec& spec,
                        const std::vector<std::vector<int>>& ranks);

// Building blocks shared with the CPU-emulated run (step_fwd_emulated_test.cpp).
inline constexpr int kRowPad = 8;  // extra, poisoned elements per row, never to be read or written
inline constexpr uint16_t kPoison16 = 0xFFFF;  // NaN in bf16 and fp16
// The rows at `positions` of a full [batch][heads][seq][head_dim] tensor as a 16-bit
// [batch][heads][rows][head_dim + kRowPad] tensor with poisoned padding.
std::vector<uint16_t> gather_rows(const std::vector<double>& full, int batch, int heads, int seq,
                                  int dim, const std::vector<int>& positions, Dtype dtype);
// Copies one rank's final out (padded layout) and lse into run->result at its positions, and
// records in run->failure the first padding element that changed or output that is not finite.
void collect_rank(const AttentionProblem& p, Dtype dtype, int rank, const std::vector<int>& positions,
                  const std::vector<uint16_t>& out, const std::vector<float>& lse, RingRun* run);
// Kernel parameters of step `step` of `rank` (chunk of rank (rank - step) mod N), with pointers
// left null and strides for the padded layouts above.
RingFwdParams step_params(const AttentionProblem& p, const std::vector<std::vector<int>>& ranks,
                          int rank, int step);

struct Comparison {
  double out_rel_frobenius = 0;
  double lse_max_abs = 0;
  std::string worst;  // the worst output element: index, expected, actual
};
Comparison compare(const AttentionOutput& expected, const AttentionOutput& actual, int head_dim);

}  // namespace cpgen::testing
