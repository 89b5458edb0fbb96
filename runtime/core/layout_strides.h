// Checks of caller-given tensor strides (the presets are declared in cpgen/problem.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cpgen/problem.h"

namespace cpgen {

// Throws Error(kBadInput), one line naming `what` (e.g. "RingAttention: k of rank 2"), the
// stride and what is allowed, unless `s` describes a tensor of [batch, heads, rows, head_dim]
// whose strides are non-negative multiples of 8 elements (16-byte rows) and whose elements do
// not overlap: ordered by stride, each dimension of more than one entry must step over the whole
// extent of the dimensions inside it (head_dim innermost), within int64 elements.
void check_tensor_strides(const TensorStrides& s, const std::string& what, int64_t batch, int64_t heads,
                          int64_t rows, int64_t head_dim);

// Elements from a tensor's first element to one past its last: what a copy of it spans. Throws
// Error(kBadInput) where that leaves int64 (strides check_tensor_strides refuses).
int64_t tensor_span(const TensorStrides& s, int64_t batch, int64_t heads, int64_t rows, int64_t head_dim);

// Host copies of one rank's shard between row-major [batch, heads, rows, head_dim] (rows from
// the size) and the element order of the named layout preset: how host-side runs (the emulated
// and GPU verify rings, tests) hand the ring tensors the way a framework in that layout would.
template <typename T>
std::vector<T> shard_to_layout(const std::vector<T>& bhsd, const std::string& layout, int64_t batch, int64_t heads,
                               int64_t head_dim) {
  const int64_t rows = static_cast<int64_t>(bhsd.size()) / (batch * heads * head_dim);
  const TensorStrides s = layout_strides(layout, batch, heads, rows, head_dim);
  std::vector<T> laid(bhsd.size());
  size_t i = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t d = 0; d < head_dim; ++d) laid[static_cast<size_t>(b * s.batch + h * s.head + r * s.row + d)] = bhsd[i++];
  return laid;
}

template <typename T>
std::vector<T> shard_from_layout(const std::vector<T>& laid, const std::string& layout, int64_t batch, int64_t heads,
                                 int64_t head_dim) {
  const int64_t rows = static_cast<int64_t>(laid.size()) / (batch * heads * head_dim);
  const TensorStrides s = layout_strides(layout, batch, heads, rows, head_dim);
  std::vector<T> bhsd(laid.size());
  size_t i = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t d = 0; d < head_dim; ++d) bhsd[i++] = laid[static_cast<size_t>(b * s.batch + h * s.head + r * s.row + d)];
  return bhsd;
}

}  // namespace cpgen
