// The GPU ring benchmark behind `cpgen bench`: times the forward step kernel alone, the whole
// loopback ring forward, every (rank, step) launch of that ring alone, the ring backward and
// forward + backward, and one single-GPU attention of the same total work run by cpgen's own
// kernel (cp_size 1), and checks the ring's output against the
// float64 CPU reference on a slice of rows. Backward TFLOP/s count 2.5x the forward's useful
// FLOPs, as FlashAttention reports them (the backward's five tile GEMMs against the forward's
// two); the backward's numbers are checked by `cpgen verify`, the bench only checks that every
// gradient element was written and is finite.
#pragma once

#include <cuda.h>

#include <functional>
#include <string>
#include <vector>

#include "cpgen/problem.h"

namespace cpgen::gpu {

struct BenchOptions {
  int device = 0;
  int warmup = 3;
  int iterations = 20;
  int check_rows = 32;     // query positions checked against the CPU reference (per checked head)
  uint32_t seed = 1;
};

// The forward ring's launches of one step type, each timed alone (bench_loopback).
struct StepTypeTimes {
  std::string step_type;  // step_type_name: "diagonal", "zigzag-q-half", ...
  std::string kernel_uri;
  int launches = 0;       // the (rank, step) pairs of this type that launch a kernel
  double ms = 0;          // the sum of their medians
};

struct BenchResult {
  std::string kernel_uri, config_source;
  double useful_flops = 0;          // 4 * head_dim per visible (query, key) pair, all heads
  double ring_ms = 0;               // median of the whole forward ring (all virtual ranks)
  double single_ms = 0;             // median of one attention over the whole sequence
  std::string single_kernel_uri;    // its kernel
  double step_ms = 0;               // median of rank 0's step 0 kernel alone (0: it launches none)
  double step_flops = 0;            // useful FLOPs of that step
  double ring_tflops = 0, single_tflops = 0, step_tflops = 0;
  double overhead = 0;              // ring_ms / single_ms - 1
  // Where the overhead comes from: every (rank, step) launch of the forward ring timed alone, one
  // after another, on the chunk the ring hands it (loopback only). Their sum against single_ms is
  // what the per-step kernels cost over one kernel (smaller launches, the state's traffic); ring_ms
  // against their sum is what running the ranks' launches and copies together costs or saves.
  double steps_alone_ms = 0;        // 0 when not timed (steps_note says why)
  std::vector<StepTypeTimes> step_types;  // by first launch in (rank, step) order
  std::string steps_note;           // why the launches were not timed alone (an NCCL run)
  std::string backward_kernel_uri;  // ring step 0's backward kernel
  double backward_ms = 0;           // median of the whole backward ring
  double fwd_bwd_ms = 0;            // median of a forward ring then a backward ring
  double backward_tflops = 0;       // 2.5 * useful_flops / backward_ms
  double fwd_bwd_tflops = 0;        // 3.5 * useful_flops / fwd_bwd_ms
  bool grads_finite = false;        // every dq, dk, dv element written and finite
  double check_out_error = 0;       // relative Frobenius error on the checked slice
  double check_lse_error = 0;       // max |lse error| on the checked slice
  int checked_rows = 0;
  int64_t check_nonfinite = 0;      // unwritten out or lse elements anywhere (SliceErrors::nonfinite)
  bool check_passed = false;
};

// Number of (query, key) pairs a causal or full attention computes: positions are global.
double visible_pairs(const std::vector<int64_t>& q_positions, const std::vector<int64_t>& k_positions,
                     bool causal);

// Inputs of a benchmark: normal(0, 1) values rounded to bf16, full tensors in global order.
struct BenchInputs {
  std::vector<float> q, k, v;
};
BenchInputs bench_inputs(const Problem& problem, uint32_t seed);
// The output gradient of a backward benchmark, like q (normal(0, 1) rounded to bf16).
std::vector<float> bench_dout(const Problem& problem, uint32_t seed);
// FlashAttention's convention: a backward does 2.5x the forward's useful FLOPs.
inline constexpr double kBackwardFlopsFactor = 2.5;

// Global query positions checked against the float64 reference: `count` evenly spaced positions
// including the first and the last.
std::vector<int64_t> check_positions(int64_t seq_len, int count);

// Errors of the checked rows (query heads 0 and q_heads - 1 of batches 0 and batch - 1) that rank `rank` holds
// (rank -1: every rank; outs/lses then hold every rank's shard, else only outs[rank] is read).
struct SliceErrors {
  double sq_diff = 0, sq_ref = 0;  // sums of squares: relative error = sqrt(sq_diff / sq_ref)
  double lse_max = 0;              // max |lse error|; NaN if any output row was not written
  int rows = 0;
  // out and lse elements anywhere in the checked ranks' shards (not only the sampled rows) that
  // are NaN or infinite: the outputs are poisoned with NaN before the checked run, so these were
  // never written (a causal or full problem's every row sees a key, so no lse is -inf).
  int64_t nonfinite = 0;
  void add(const SliceErrors& other);
  double relative() const;
  bool passed() const;  // relative <= 2e-2, lse_max <= 2e-2 (docs/formats.md tolerances), nonfinite 0
};
SliceErrors check_slice(const Problem& problem, const BenchInputs& in,
                        const std::vector<std::vector<float>>& outs,
                        const std::vector<std::vector<float>>& lses, int rank,
                        const std::vector<int64_t>& positions);

// Median time in ms of `iterations` runs of one attention of the whole problem on one GPU
// (cp_size 1, cpgen's own kernel, the one selection gives it: kernel_uri receives its URI).
double time_single_attention(const Problem& problem, const BenchInputs& in, const BenchOptions& options,
                             std::string* kernel_uri = nullptr);

// Median of `iterations` CUDA-event timings of what `enqueue` queues on `stream`, after `warmup`
// untimed runs.
double time_on_stream_ms(CUstream stream, int warmup, int iterations, const std::function<void()>& enqueue);

// Runs the benchmark of a loopback ring; throws kNoDevice without a GPU.
BenchResult bench_loopback(const Problem& problem, const BenchOptions& options);

}  // namespace cpgen::gpu
