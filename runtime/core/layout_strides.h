// Checks of caller-given tensor strides (the presets are declared in cpgen/problem.h).
#pragma once

#include <cstdint>
#include <string>

#include "cpgen/problem.h"

namespace cpgen {

// Throws Error(kBadInput), one line naming `what` (e.g. "RingAttention: k of rank 2"), the
// stride and what is allowed, unless `s` describes a tensor of [batch, heads, rows, head_dim]
// whose strides are non-negative multiples of 8 elements (16-byte rows) and whose elements do
// not overlap: ordered by stride, each dimension of more than one entry must step over the whole
// extent of the dimensions inside it (head_dim innermost).
void check_tensor_strides(const TensorStrides& s, const std::string& what, int64_t batch, int64_t heads,
                          int64_t rows, int64_t head_dim);

// Elements from a tensor's first element to one past its last: what a copy of it spans.
int64_t tensor_span(const TensorStrides& s, int64_t batch, int64_t heads, int64_t rows, int64_t head_dim);

}  // namespace cpgen
