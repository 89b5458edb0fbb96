#include "runtime/core/layout_strides.h"

#include <algorithm>
#include <array>

#include "cpgen/error.h"

namespace cpgen {

TensorStrides layout_strides(const std::string& layout, int64_t batch, int64_t heads, int64_t rows,
                             int64_t head_dim) {
  if (layout.empty() || layout == "bhsd") return {heads * rows * head_dim, rows * head_dim, head_dim};
  // thd is bshd with one sequence: the packed tokens are the rows.
  if (layout == "bshd" || layout == "thd") return {rows * heads * head_dim, head_dim, heads * head_dim};
  if (layout == "sbhd") return {heads * head_dim, head_dim, batch * heads * head_dim};
  throw_bad_input("layout \"" + layout + "\" is not supported; allowed: bhsd, bshd, sbhd, thd");
}

ShardStrides layout_shard_strides(const Problem& p, int64_t rows) {
  const TensorStrides q = layout_strides(p.layout, p.batch, p.q_heads, rows, p.head_dim);
  const TensorStrides kv = layout_strides(p.layout, p.batch, p.kv_heads, rows, p.head_dim);
  return {q, kv, kv, q, q, q, kv, kv};
}

int64_t tensor_span(const TensorStrides& s, int64_t batch, int64_t heads, int64_t rows, int64_t head_dim) {
  if (batch <= 0 || heads <= 0 || rows <= 0) return 0;
  return (batch - 1) * s.batch + (heads - 1) * s.head + (rows - 1) * s.row + head_dim;
}

void check_tensor_strides(const TensorStrides& s, const std::string& what, int64_t batch, int64_t heads,
                          int64_t rows, int64_t head_dim) {
  struct Dim {
    const char* name;
    int64_t stride, size;
  };
  std::array<Dim, 3> dims{{{"batch", s.batch, batch}, {"head", s.head, heads}, {"row", s.row, rows}}};
  for (const Dim& d : dims)
    if (d.stride < 0 || d.stride % 8 != 0)
      throw_bad_input(what + ": " + d.name + " stride " + std::to_string(d.stride) +
                      " is not allowed; allowed: a non-negative multiple of 8 elements (rows move as 16-byte pieces)");
  if (batch <= 0 || heads <= 0 || rows <= 0) return;  // no element (a rank without rows): nothing overlaps
  // Non-overlap: innermost first, every dimension that has more than one entry must start its
  // second entry past the extent of everything inside it.
  std::sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  int64_t extent = head_dim;  // elements the dimensions inside span so far
  const char* inside = "head_dim";
  for (const Dim& d : dims) {
    if (d.size <= 1) continue;
    if (d.stride < extent)
      throw_bad_input(what + ": " + d.name + " stride " + std::to_string(d.stride) + " makes its " +
                      std::to_string(d.size) + " entries overlap; allowed: at least " + std::to_string(extent) +
                      " (the extent of " + inside + " inside it)");
    extent = d.stride * (d.size - 1) + extent;
    inside = d.name;
  }
}

}  // namespace cpgen
