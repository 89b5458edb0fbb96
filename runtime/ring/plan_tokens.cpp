#include "runtime/ring/plan_tokens.h"

#include <algorithm>
#include <utility>

#include "runtime/core/attention_shape.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/schedule.h"

namespace cpgen {
namespace {

// Tokens rank r holds of one document of `length` (the rules of runtime/ring/partition.h).
int64_t chunk_size(int64_t length, int64_t chunks, int64_t chunk) {
  return length / chunks + (chunk < length % chunks ? 1 : 0);
}

int64_t tokens_in_document(Scheme scheme, int64_t length, int64_t n, int64_t r) {
  switch (scheme) {
    case Scheme::kContiguous: return chunk_size(length, n, r);
    case Scheme::kZigzag: return chunk_size(length, 2 * n, r) + chunk_size(length, 2 * n, 2 * n - 1 - r);
    case Scheme::kStriped: return r < length ? (length - r + n - 1) / n : 0;
    case Scheme::kZigzagToken: {
      // One token per full fold; the short last fold (index length / n) deals its m tokens to
      // offsets 0..m-1, which is rank r in an even fold and rank n-1-r in an odd one.
      const int64_t fold = length / n, m = length % n;
      const int64_t offset = fold % 2 == 0 ? r : n - 1 - r;
      return fold + (offset < m ? 1 : 0);
    }
  }
  return 0;
}

// First and last position rank r holds of a single document of `length` (no tokens: first > last).
struct Bounds {
  int64_t first, last;
};
Bounds chunk_bounds(int64_t length, int64_t chunks, int64_t chunk) {
  const int64_t start = chunk * (length / chunks) + std::min(chunk, length % chunks);
  return {start, start + chunk_size(length, chunks, chunk) - 1};
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
      if (tokens_in_document(scheme, length, n, r) == 0) return {0, -1};
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

}  // namespace

namespace {

// Every rank's positions increase and so do both ends of the visible intervals along them
// (attention_shape.h), so the first key at or after an interval's start and the first key past
// its end only move forward: two pointers count a (rank, step) in one pass. Fills skipped_steps,
// and visible_pairs when count_pairs (otherwise a step stops at its first visible pair).
void count_visible(const Problem& p, Scheme scheme, bool count_pairs, TokenPlan& plan) {
  const int n = static_cast<int>(p.cp_size);
  const AttentionShape shape = attention_shape_of(p);
  std::vector<std::vector<int64_t>> positions;
  for (int r = 0; r < n; ++r) positions.push_back(partition_positions(scheme, p.seq_len, n, r, p.documents));
  plan.skipped_steps = 0;
  std::vector<std::vector<int64_t>> visible(static_cast<size_t>(n), std::vector<int64_t>(static_cast<size_t>(n), 0));
  for (int r = 0; r < n; ++r) {
    std::vector<KeyInterval> keys;
    for (int64_t q : positions[r]) keys.push_back(visible_keys(shape, q));
    for (int s = 0; s < n; ++s) {
      const std::vector<int64_t>& chunk = positions[kv_source_rank(r, s, n)];
      size_t first = 0, past = 0;  // chunk[first..past) lies in the current interval
      int64_t pairs = 0;
      for (const KeyInterval& k : keys) {
        if (k.empty()) continue;
        while (first < chunk.size() && chunk[first] < k.first) ++first;
        past = std::max(past, first);
        while (past < chunk.size() && chunk[past] <= k.last) ++past;
        pairs += static_cast<int64_t>(past - first);
        if (!count_pairs && pairs > 0) break;
      }
      visible[r][s] = pairs;
      if (pairs == 0) ++plan.skipped_steps;
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
  const std::vector<int64_t> documents = p.documents.empty() ? std::vector<int64_t>{p.seq_len} : p.documents;
  plan.rank_tokens.assign(static_cast<size_t>(n), 0);
  for (int64_t length : documents)
    for (int r = 0; r < n; ++r) plan.rank_tokens[r] += tokens_in_document(scheme, length, n, r);
  const int64_t most = *std::max_element(plan.rank_tokens.begin(), plan.rank_tokens.end());
  const double mean = static_cast<double>(p.seq_len) / n;
  plan.token_imbalance = mean > 0 ? most / mean : 1.0;
  plan.ring_steps = static_cast<int64_t>(n) * n;
  // The pairs by visiting the positions, up to kMaxSkipCountTokens; the skipped steps of plain
  // causal and full problems (most of a large shapes file) in closed form otherwise, also where
  // the pairs were wanted but the sequence is too long to count them.
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
