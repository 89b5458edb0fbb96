// The size limits of a problem, the same for every entry point (C++ API, C ABI, shapes files, the
// command line), and the one check of them.
#pragma once

#include <cstdint>
#include <string>

#include "cpgen/problem.h"

namespace cpgen {

// The kernel's positions are int32 and its offsets int64; 2^30 positions keep both far from
// overflow.
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 30;
inline constexpr int64_t kMaxCpSize = 1024;
inline constexpr int64_t kMaxHeads = 1024;
inline constexpr int64_t kMaxBatch = 65536;
// Documents packed into one sequence (shapes files, vectors, Problem::documents).
inline constexpr int64_t kMaxDocuments = int64_t{1} << 20;
// Packed query rows of one kv head on one rank: the rank's tokens * (q_heads / kv_heads).
inline constexpr int64_t kMaxPackedRows = int64_t{1} << 30;
// batch * q_heads * seq_len * head_dim: keeps every byte count (fp32 state, gradients) inside
// int64.
inline constexpr int64_t kMaxShapeElements = int64_t{1} << 48;

// Throws Error(kBadInput) "<where>: <field> must be an integer 1..<max>, got <value>" for the
// first size outside the limits. Problem::validate and the shapes parser both call it.
void check_problem_limits(const Problem& problem, const std::string& where);

// What holds only once the mask is checked (check_problem_mask), the same for both callers:
// softmax_scale a float32 the kernels take, as is its quotient by the softcap; at most
// kMaxShapeElements elements; at most kMaxPackedRows packed query rows on the rank that holds the
// most tokens (documents and uneven splits give ranks more than seq_len / cp_size).
void check_problem_scale_and_size(const Problem& problem, const std::string& where);

// Throws Error(kBadInput) "<where>: <field> ..." for the first mask field outside what the
// problem model allows: documents (lengths 0..kMaxSeqLen, at most kMaxDocuments, summing to
// seq_len), window_left / window_right (-1 or 0..kMaxSeqLen), softcap (0, or 1e-30..1e30: a
// float32 in the kernels) and layout.
void check_problem_mask(const Problem& problem, const std::string& where);

}  // namespace cpgen
