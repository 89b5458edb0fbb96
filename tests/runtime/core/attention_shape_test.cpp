// The mask model: one interval of visible keys per query, from documents, a two-sided window
// and causality, against a brute-force statement of the same rules.
#include "runtime/core/attention_shape.h"

#include <gtest/gtest.h>

namespace cpgen {
namespace {

// The rules as the format-2 vectors state them, pair by pair: same document, (not causal or
// j <= i), (left unbounded or i - j <= left), (right unbounded or j - i <= right).
bool visible_by_rules(const std::vector<int64_t>& cu, bool causal, int64_t left, int64_t right,
                      int64_t i, int64_t j) {
  int64_t doc_i = -1, doc_j = -1;
  for (size_t d = 0; d + 1 < cu.size(); ++d) {
    if (cu[d] <= i && i < cu[d + 1]) doc_i = static_cast<int64_t>(d);
    if (cu[d] <= j && j < cu[d + 1]) doc_j = static_cast<int64_t>(d);
  }
  if (!cu.empty() && doc_i != doc_j) return false;
  if (causal && j > i) return false;
  if (left >= 0 && i - j > left) return false;
  if (right >= 0 && j - i > right) return false;
  return true;
}

TEST(AttentionShape, VisibleKeysMatchTheRulesPairByPair) {
  const std::vector<std::vector<int64_t>> documents = {{}, {7, 0, 1, 12}, {0, 20}, {1, 1, 18}};
  int checked_visible = 0, checked_hidden = 0;
  for (const auto& docs : documents)
    for (bool causal : {false, true})
      for (int64_t left : {-1, 0, 3})
        for (int64_t right : {-1, 0, 2}) {
          AttentionShape s;
          s.causal = causal;
          s.window_left = left;
          s.window_right = right;
          s.cu_seqlens = cu_seqlens_of(docs);
          for (int64_t i = 0; i < 20; ++i)
            for (int64_t j = 0; j < 20; ++j) {
              const bool want = visible_by_rules(s.cu_seqlens, causal, left, right, i, j);
              ASSERT_EQ(key_visible(s, i, j), want)
                  << "query " << i << " key " << j << " causal " << causal << " left " << left
                  << " right " << right << " documents " << docs.size();
              (want ? checked_visible : checked_hidden)++;
            }
        }
  EXPECT_GT(checked_visible, 1000);
  EXPECT_GT(checked_hidden, 1000);
}

TEST(AttentionShape, IntervalOfAQueryInAShortDocument) {
  AttentionShape s;
  s.causal = true;
  s.window_left = 4;
  s.cu_seqlens = cu_seqlens_of({10, 0, 1, 5});  // {0, 10, 10, 11, 16}
  EXPECT_EQ(s.cu_seqlens, (std::vector<int64_t>{0, 10, 10, 11, 16}));
  const KeyInterval one_token = visible_keys(s, 10);  // the one-token document sees only itself
  EXPECT_EQ(one_token.first, 10);
  EXPECT_EQ(one_token.last, 10);
  const KeyInterval windowed = visible_keys(s, 8);
  EXPECT_EQ(windowed.first, 4);
  EXPECT_EQ(windowed.last, 8);
  const KeyInterval doc_start = visible_keys(s, 12);  // window reaches past the document start
  EXPECT_EQ(doc_start.first, 11);
  EXPECT_EQ(doc_start.last, 12);
}

TEST(AttentionShape, SoftcapBoundsLogitsAndScalesTheirSlope) {
  AttentionShape s;
  s.scale = 0.5;
  EXPECT_DOUBLE_EQ(attention_logit(s, 8), 4);
  EXPECT_DOUBLE_EQ(logit_slope(s, 4), 1);
  s.softcap = 2;
  EXPECT_NEAR(attention_logit(s, 8), 2 * std::tanh(2.0), 1e-15);
  EXPECT_LE(attention_logit(s, 1e6), 2);
  EXPECT_GT(attention_logit(s, 1e6), 1.999);
  const double t = attention_logit(s, 3);
  EXPECT_NEAR(logit_slope(s, t), 1 - std::tanh(0.75) * std::tanh(0.75), 1e-15);
}

}  // namespace
}  // namespace cpgen
