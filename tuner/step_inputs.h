// Host-side pieces of a tuning run that need no GPU, so the CPU tests check them: the global
// positions a workload's step sees, exact 16-bit float encoding, and the float64 reference rows
// that the reference config is checked against.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/workload.h"

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

// Values k/64, |k| <= 64, are exact in bf16 and fp16 alike, so inputs need no rounding and the
// CPU reference sees exactly what the GPU does. Both go through runtime/core/half_convert.h;
// encode_exact throws kInternal for a value that conversion would have to round.
uint16_t encode_exact(double value, Dtype dtype);
double decode_16(uint16_t bits, Dtype dtype);

// Query-key pairs a launch computes usefully: for each query, the keys at or before it (all keys
// when not causal). Times 4 * head_dim * batch * q_heads gives the useful FLOPs.
int64_t visible_pairs(const StepPositions& pos, bool causal);

// Float64 attention of one query row: out (head_dim) and lse (natural log) over the visible keys.
// q_row: head_dim values; k, v: [kv_len, head_dim] of the row's kv head.
void reference_row(const double* q_row, const double* k, const double* v, int64_t kv_len, int head_dim, double scale,
                   int q_position, const std::vector<int>& kv_positions, bool causal, double* out, double* lse);

}  // namespace cpgen
