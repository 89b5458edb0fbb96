#include "runtime/ring/plan_tokens.h"

#include <algorithm>
#include <utility>

#include "runtime/core/attention_shape.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/schedule.h"

namespace cpgen {
namespace {

// First and last position rank r holds of a single document of `length` (no tokens: first > last).
struct Bounds {
  int64_t first, last;
};
Bounds chunk_bounds(int64_t length, int64_t chunks, int64_t chunk) {
  return {chunk_first_offset(length, chunks, chunk), chunk_first_offset(length, chunks, chunk + 1) - 1};
}
Bounds single_document_bounds(Scheme scheme, int64_t length, int64_t n, int64_t r) {
  switch (scheme) {
    case Scheme::kContiguous: return chunk_bounds(length, n, r);
    case Scheme::kZigzag: {
      const Bounds a = chunk_bounds(length, 2 * n, r), b = chunk_bounds(length, 2 * n, 2 * n - 1 - r);
      if (a.first > a.last) return b;
      if (b.first > b.last) return a;
      return {a.first, b.last};
    }
    case Scheme::kStriped:
      return r < length ? Bounds{r, r + (length - 1 - r) / n * n} : Bounds{0, -1};
    case Scheme::kZigzagToken: {
      // Fold f holds positions f n .. f n + n - 1; rank r takes offset r in even folds and n-1-r
      // in odd ones; the last fold may be short.
      if (r >= length) return {0, -1};  // fold 0 (offsets 0 .. n - 1) is the first to reach rank r
      auto position = [&](int64_t fold) { return fold * n + (fold % 2 == 0 ? r : n - 1 - r); };
      int64_t fold = (length - 1) / n;
      if (position(fold) >= length) --fold;
      return {r, position(fold)};
    }
  }
  return {0, -1};
}

// Causal over one document without a window, in O(1) per step from each rank's first and last
// position: a chunk is seen when its first key is at or before the rank's last query. (Full
// attention over one document sees every non-empty chunk.) Empty ranks and chunks see nothing.
int64_t skipped_steps_single_document(const Problem& p, Scheme scheme) {
  const int n = static_cast<int>(p.cp_size);
  std::vector<Bounds> bounds;
  for (int r = 0; r < n; ++r) bounds.push_back(single_document_bounds(scheme, p.seq_len, n, r));
  int64_t skipped = 0;
  for (int r = 0; r < n; ++r)
    for (int s = 0; s < n; ++s) {
      const Bounds& q = bounds[static_cast<size_t>(r)];
      const Bounds& k = bounds[static_cast<size_t>(kv_source_rank(r, s, n))];
      const bool seen = q.first <= q.last && k.first <= k.last && (!p.causal || k.first <= q.last);
      if (!seen) ++skipped;
    }
  return skipped;
}

// Every query's visible keys lie in its own document (attention_shape.h), so the keys of chunk s
// that query q sees are s's positions among the document's first last + 1 offsets less those among
// its first `first` offsets: RankRowCounts gives both for every chunk at once. One pass over the
// documents' positions, each added to its owner's counts: O(seq_len + documents + cp_size^2)
// time and O(cp_size^2) memory, whatever the scheme, mask or number of ranks. Fills visible_pairs
// when count_pairs, and skipped_steps.
void count_visible(const Problem& p, Scheme scheme, bool count_pairs, TokenPlan& plan) {
  const int n = static_cast<int>(p.cp_size);
  const AttentionShape shape = attention_shape_of(p);
  std::vector<RankRowCounts> chunk_pairs(static_cast<size_t>(n), RankRowCounts(scheme, n));
  auto count_document = [&](int64_t start, int64_t length) {
    for (int64_t offset = 0; offset < length; ++offset) {
      const KeyInterval keys = visible_keys_in_document(shape, start + offset, start, start + length - 1);
      if (keys.empty()) continue;
      RankRowCounts& owner = chunk_pairs[static_cast<size_t>(document_offset_owner(scheme, length, n, offset))];
      owner.add_prefix(length, keys.last + 1 - start, 1);
      owner.add_prefix(length, keys.first - start, -1);
    }
  };
  if (p.documents.empty()) {
    count_document(0, p.seq_len);
  } else {
    int64_t start = 0;
    for (int64_t length : p.documents) {
      count_document(start, length);
      start += length;
    }
  }
  plan.skipped_steps = 0;
  std::vector<std::vector<int64_t>> visible(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const std::vector<int64_t> by_chunk = chunk_pairs[static_cast<size_t>(r)].counts();
    std::vector<int64_t>& steps = visible[static_cast<size_t>(r)];
    for (int s = 0; s < n; ++s) {
      steps.push_back(by_chunk[static_cast<size_t>(kv_source_rank(r, s, n))]);
      if (steps.back() == 0) ++plan.skipped_steps;
    }
  }
  if (count_pairs) plan.visible_pairs = std::move(visible);
}

}  // namespace

bool plan_counts_steps_in_closed_form(const Problem& p, Scheme scheme) {
  (void)scheme;  // every scheme has closed-form bounds
  return !kernel_needs_key_intervals(p);  // documents or a window (a causal right side is moot)
}

int64_t count_skipped_steps(const Problem& p, Scheme scheme) {
  TokenPlan plan;
  count_visible(p, scheme, false, plan);
  return plan.skipped_steps;
}

TokenPlan plan_tokens(const Problem& p, Scheme scheme, bool count_pairs) {
  TokenPlan plan;
  const int n = static_cast<int>(p.cp_size);
  plan.rank_tokens = partition_rows_all(scheme, p.seq_len, n, p.documents);
  const int64_t most = *std::max_element(plan.rank_tokens.begin(), plan.rank_tokens.end());
  const double mean = static_cast<double>(p.seq_len) / n;
  plan.token_imbalance = mean > 0 ? most / mean : 1.0;
  plan.ring_steps = static_cast<int64_t>(n) * n;
  // The pairs by visiting the queries, up to kMaxSkipCountTokens; the skipped steps of plain
  // causal and full problems (most of a large shapes file) in closed form otherwise (cheaper still),
  // also where the pairs were wanted but the sequence is too long to count them.
  if (count_pairs && p.seq_len <= kMaxSkipCountTokens) {
    count_visible(p, scheme, true, plan);
  } else if (plan_counts_steps_in_closed_form(p, scheme)) {
    plan.skipped_steps = skipped_steps_single_document(p, scheme);
  } else if (p.seq_len <= kMaxSkipCountTokens) {
    count_visible(p, scheme, false, plan);
  }
  return plan;
}

}  // namespace cpgen
