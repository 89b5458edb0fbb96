#include "runtime/core/layout_strides.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

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

namespace {

// a * b + c, or nothing where it leaves int64.
std::optional<int64_t> multiply_add(int64_t a, int64_t b, int64_t c) {
  int64_t product = 0, sum = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(product, c, &sum)) return std::nullopt;
  return sum;
}

}  // namespace

int64_t tensor_span(const TensorStrides& s, int64_t batch, int64_t heads, int64_t rows, int64_t head_dim) {
  if (batch <= 0 || heads <= 0 || rows <= 0) return 0;
  std::optional<int64_t> span = head_dim;
  for (const auto& [count, stride] : {std::pair{batch, s.batch}, {heads, s.head}, {rows, s.row}})
    if (span) span = multiply_add(count - 1, stride, *span);
  if (!span) throw_bad_input("a tensor's strides span more than 2^63 elements");
  return *span;
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
    const std::optional<int64_t> next = multiply_add(d.stride, d.size - 1, extent);
    if (!next)
      throw_bad_input(what + ": " + d.name + " stride " + std::to_string(d.stride) + " over " + std::to_string(d.size) +
                      " entries spans more than 2^63 elements; allowed: strides whose tensor fits in memory");
    extent = *next;
    inside = d.name;
  }
}

}  // namespace cpgen
