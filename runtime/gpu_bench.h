// The GPU ring benchmark behind `cpgen bench`: times the forward step kernel alone, the whole
// loopback ring, and one single-GPU attention of the same total work run by cpgen's own kernel
// (cp_size 1), and checks the ring's output against the float64 CPU reference on a slice of rows.
#pragma once

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

struct BenchResult {
  std::string kernel_uri, config_source;
  double useful_flops = 0;          // 4 * head_dim per visible (query, key) pair, all heads
  double ring_ms = 0;               // median of the whole forward ring (all virtual ranks)
  double single_ms = 0;             // median of one attention over the whole sequence
  double step_ms = 0;               // median of rank 0's step 0 kernel alone
  double step_flops = 0;            // useful FLOPs of that step
  double ring_tflops = 0, single_tflops = 0, step_tflops = 0;
  double overhead = 0;              // ring_ms / single_ms - 1
  double check_out_error = 0;       // relative Frobenius error on the checked slice
  double check_lse_error = 0;       // max |lse error| on the checked slice
  int checked_rows = 0;
  bool check_passed = false;
};

// Number of (query, key) pairs a causal or full attention computes: positions are global.
double visible_pairs(const std::vector<int64_t>& q_positions, const std::vector<int64_t>& k_positions,
                     bool causal);

// Runs the benchmark of a loopback ring; throws kNoDevice without a GPU.
BenchResult bench_loopback(const Problem& problem, const BenchOptions& options);

}  // namespace cpgen::gpu
