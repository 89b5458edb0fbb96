// Reference attention vectors (formats cpgen-attention-vectors/1 and /2, docs/formats.md): one
// problem over the whole sequence with float64 expected outputs and gradients. Format 2 adds
// packed documents, a two-sided window and a logit softcap. Used by the tests and by
// `cpgen verify`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cpgen/problem.h"
#include "runtime/core/attention_shape.h"

namespace cpgen {

inline constexpr const char* kAttentionVectorsFormat = "cpgen-attention-vectors/1";
inline constexpr const char* kAttentionVectorsFormat2 = "cpgen-attention-vectors/2";

struct AttentionVectors {
  int format = 1;  // 1 or 2
  std::string name;
  AttentionShape shape;   // the mask too: format 1's window w is window_left w - 1
  int64_t seq_len = 0;
  // Inputs, [batch][heads][seq][head_dim] in global position order (bf16-exact values).
  std::vector<double> q, k, v, dout;
  // Expected: out [batch][q_heads][seq][head_dim], lse [batch][q_heads][seq] (natural log),
  // gradients of loss = sum(out * dout).
  std::vector<double> out, lse, dq, dk, dv;
};

// A vectors file holds a small problem's tensors as decimal text (the largest reference files are
// a few MiB); one longer than this is taken for the wrong file.
inline constexpr size_t kMaxVectorsFileBytes = size_t{1} << 30;

// Throws Error(kBadInput) with one line naming the source and what is wrong: not JSON, a NUL byte,
// another format, a missing or mistyped field, a tensor of the wrong size.
AttentionVectors parse_attention_vectors(const std::string& text, const std::string& source);
// Also kBadInput when the path is a folder, cannot be opened or read, or is longer than
// kMaxVectorsFileBytes (runtime/core/text_file.h says how each is worded).
AttentionVectors load_attention_vectors(const std::string& path);

// The ring problem that runs these vectors: their name, shape, mask (documents, window, softcap)
// and scale, split over cp_size ranks by scheme in dtype. Backends whose kernels lack a mask
// feature refuse the problem (runtime/ring/kernel_support.h).
Problem problem_from_vectors(const AttentionVectors& vec, int64_t cp_size, Scheme scheme, Dtype dtype);

// ||actual - expected||_F / ||expected||_F (absolute norm of the difference when expected is 0).
// Throws Error(kInternal) on a size mismatch. NaN anywhere gives NaN (which fails any bound).
double relative_error(const std::vector<double>& actual, const std::vector<double>& expected);
double relative_error(const std::vector<float>& actual, const std::vector<double>& expected);

}  // namespace cpgen
