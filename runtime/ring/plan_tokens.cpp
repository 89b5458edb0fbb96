#include "runtime/ring/plan_tokens.h"

#include <algorithm>
#include <utility>

#include "runtime/core/attention_shape.h"
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

}  // namespace

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
  if (p.seq_len > kMaxSkipCountTokens) return plan;

  // Every rank's positions increase and so do both ends of the visible intervals along them
  // (attention_shape.h), so the first key at or after an interval's start and the first key past
  // its end only move forward: two pointers count a (rank, step) in one pass.
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
  return plan;
}

}  // namespace cpgen
