// The layout presets (cpgen/problem.h) and the stride checks (runtime/core/layout_strides.h).
#include "runtime/core/layout_strides.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "cpgen/error.h"

namespace cpgen {
namespace {

std::string message_of(const TensorStrides& s, int64_t batch, int64_t heads, int64_t rows, int64_t hd) {
  try {
    check_tensor_strides(s, "q of rank 0", batch, heads, rows, hd);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    return e.what();
  }
  return "";
}

// Every preset places each (batch, head, row, column) at its own element, filling exactly
// batch x heads x rows x head_dim elements (dense), and passes the check.
TEST(LayoutStrides, EveryPresetIsADensePermutation) {
  const int64_t batch = 3, heads = 2, rows = 5, hd = 8;
  for (const char* layout : {"", "bhsd", "bshd", "sbhd"}) {
    const TensorStrides s = layout_strides(layout, batch, heads, rows, hd);
    std::set<int64_t> seen;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t d = 0; d < hd; ++d) seen.insert(b * s.batch + h * s.head + r * s.row + d);
    EXPECT_EQ(seen.size(), static_cast<size_t>(batch * heads * rows * hd)) << layout;
    EXPECT_EQ(*seen.rbegin(), batch * heads * rows * hd - 1) << layout;
    EXPECT_EQ(tensor_span(s, batch, heads, rows, hd), batch * heads * rows * hd) << layout;
    EXPECT_EQ(message_of(s, batch, heads, rows, hd), "") << layout;
  }
  EXPECT_EQ(layout_strides("bshd", 3, 2, 5, 8), (TensorStrides{5 * 2 * 8, 8, 2 * 8}));
  EXPECT_EQ(layout_strides("sbhd", 3, 2, 5, 8), (TensorStrides{2 * 8, 8, 3 * 2 * 8}));
  EXPECT_EQ(layout_strides("thd", 1, 2, 5, 8), layout_strides("bshd", 1, 2, 5, 8));
  EXPECT_THROW(layout_strides("bsdh", 1, 2, 5, 8), Error);
}

// A shard moved into a layout and back is unchanged, and in bshd element (b, h, r, d) sits at
// ((b * rows + r) * heads + h) * head_dim + d.
TEST(LayoutStrides, ShardCopiesIntoALayoutAndBack) {
  const int64_t batch = 2, heads = 3, rows = 4, hd = 8;
  std::vector<int> bhsd(static_cast<size_t>(batch * heads * rows * hd));
  for (size_t i = 0; i < bhsd.size(); ++i) bhsd[i] = static_cast<int>(i);
  const std::vector<int> laid = shard_to_layout(bhsd, "bshd", batch, heads, hd);
  EXPECT_EQ(laid[((1 * rows + 2) * heads + 1) * hd + 5], bhsd[((1 * heads + 1) * rows + 2) * hd + 5]);
  for (const char* layout : {"bhsd", "bshd", "sbhd"})
    EXPECT_EQ(shard_from_layout(shard_to_layout(bhsd, layout, batch, heads, hd), layout, batch, heads, hd), bhsd)
        << layout;
}

TEST(LayoutStrides, ProblemPresetsGiveQAndKvTheirHeads) {
  Problem p;
  p.batch = 2;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.layout = "bshd";
  const ShardStrides s = layout_shard_strides(p, 10);
  EXPECT_EQ(s.q.row, 8 * 64);
  EXPECT_EQ(s.dout, s.q);
  EXPECT_EQ(s.dq, s.q);
  EXPECT_EQ(s.out, s.q);
  EXPECT_EQ(s.k.row, 2 * 64);
  EXPECT_EQ(s.dk, s.k);
  EXPECT_EQ(s.v, s.k);
}

TEST(LayoutStrides, CheckNamesTheStrideAndWhatIsAllowed) {
  EXPECT_EQ(message_of({64, 64, 12}, 1, 1, 4, 64),
            "q of rank 0: row stride 12 is not allowed; allowed: a non-negative multiple of 8 elements (rows move "
            "as 16-byte pieces)");
  EXPECT_EQ(message_of({-8, 64, 64}, 2, 1, 4, 64).find("q of rank 0: batch stride -8"), 0u);
  // Rows 32 apart with 64 columns overlap.
  EXPECT_EQ(message_of({0, 0, 32}, 1, 1, 4, 64),
            "q of rank 0: row stride 32 makes its 4 entries overlap; allowed: at least 64 (the extent of head_dim "
            "inside it)");
  // Batch entries inside one head's rows overlap too.
  EXPECT_NE(message_of({128, 4 * 64, 64}, 2, 2, 4, 64).find("batch stride 128 makes its 2 entries overlap"),
            std::string::npos);
  // A dimension of one entry never uses its stride; gaps between rows are fine (a view).
  EXPECT_EQ(message_of({0, 0, 3 * 64}, 1, 1, 4, 64), "");
  EXPECT_EQ(message_of({7 * 8, 0, 64}, 1, 1, 4, 64), "");
  // A rank without rows holds no element: its presets (all 0 but the row) overlap nothing.
  EXPECT_EQ(message_of(layout_strides("bhsd", 2, 2, 0, 64), 2, 2, 0, 64), "");
}

// Strides whose extent leaves int64 are refused, not wrapped into a small extent that the next
// dimension then passes (head stride INT64_MAX - 7 over 3 heads was accepted).
TEST(LayoutStrides, AnExtentPastInt64IsRefused) {
  const int64_t huge = INT64_MAX - 7;  // a multiple of 8
  EXPECT_NE(message_of({0, huge, 128}, 1, 3, 1, 128).find("head stride " + std::to_string(huge) +
                                                          " over 3 entries spans more than 2^63 elements"),
            std::string::npos);
  EXPECT_NE(message_of({int64_t{1} << 62, int64_t{1} << 60, 128}, 3, 2, 1, 128).find("batch stride"), std::string::npos);
  // The largest extent that fits is fine.
  EXPECT_EQ(message_of({0, int64_t{1} << 61, 128}, 1, 3, 1, 128), "");
  EXPECT_THROW(tensor_span({0, int64_t{1} << 60, int64_t{1} << 60}, 1, 2, 16, 128), Error);
  EXPECT_EQ(tensor_span({0, int64_t{1} << 61, 128}, 1, 3, 1, 128), (int64_t{1} << 62) + 128);
}

}  // namespace
}  // namespace cpgen
