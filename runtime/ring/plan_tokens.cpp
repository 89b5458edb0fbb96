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

// Adds, for every rank s at once, `sign` times the number of positions s holds among the first
// `count` offsets of a document of `length` tokens (0 <= count <= length), split the way the
// partition splits each document (runtime/ring/partition.h). The count of rank s is
// `constant + sum(diff[0..s])`: a scheme's prefix count is a constant plus a few rank ranges.
class RankPrefixCounts {
 public:
  RankPrefixCounts(Scheme scheme, int64_t n) : scheme_(scheme), n_(n), diff_(static_cast<size_t>(n) + 1, 0) {}

  void add(int64_t length, int64_t count, int64_t sign) {
    if (count <= 0) return;
    switch (scheme_) {
      case Scheme::kContiguous: add_chunks(length, n_, count, sign); return;
      case Scheme::kZigzag: add_chunks(length, 2 * n_, count, sign); return;
      case Scheme::kStriped:
        // Rank s holds offsets s, s + n, ...: one per full group of n, and the short group's first
        // count % n offsets belong to ranks 0 .. count % n - 1.
        constant_ += sign * (count / n_);
        add_ranks(0, count % n_, sign);
        return;
      case Scheme::kZigzagToken: {
        // One per full fold; the short fold f = count / n holds offsets 0 .. m - 1, rank s's offset
        // being s in an even fold and n - 1 - s in an odd one.
        const int64_t fold = count / n_, m = count % n_;
        constant_ += sign * fold;
        if (fold % 2 == 0) add_ranks(0, m, sign);
        else add_ranks(n_ - m, n_, sign);
        return;
      }
    }
  }

  // Rank s's count, s = 0 .. n - 1.
  std::vector<int64_t> counts() const {
    std::vector<int64_t> out(static_cast<size_t>(n_));
    int64_t running = constant_;
    for (int64_t s = 0; s < n_; ++s) out[static_cast<size_t>(s)] = running += diff_[static_cast<size_t>(s)];
    return out;
  }

 private:
  void add_ranks(int64_t first, int64_t past, int64_t value) {
    if (first >= past) return;
    diff_[static_cast<size_t>(first)] += value;
    diff_[static_cast<size_t>(past)] -= value;
  }
  // Chunks [first, past) of `chunks`: contiguous has one chunk per rank; zigzag has two, chunk c
  // < n on rank c and chunk c >= n on rank 2n - 1 - c, so a chunk range is up to two rank ranges.
  void add_chunk_range(int64_t chunks, int64_t first, int64_t past, int64_t value) {
    if (chunks == n_) return add_ranks(first, past, value);
    add_ranks(first, std::min(past, n_), value);
    const int64_t high = std::max(first, n_);
    if (high < past) add_ranks(2 * n_ - past, 2 * n_ - high, value);
  }
  // The first `count` offsets of a document cut into `chunks` chunks (sizes length / chunks, the
  // first length % chunks one longer): the whole chunks before the one holding offset count - 1,
  // and that one's share.
  void add_chunks(int64_t length, int64_t chunks, int64_t count, int64_t sign) {
    const int64_t base = length / chunks, longer = length % chunks;
    const int64_t last = count - 1, boundary = longer * (base + 1);
    const int64_t chunk = last < boundary ? last / (base + 1) : longer + (last - boundary) / base;
    const int64_t start = chunk * base + std::min(chunk, longer);
    add_chunk_range(chunks, 0, chunk, sign * base);
    add_chunk_range(chunks, 0, std::min(chunk, longer), sign);
    add_chunk_range(chunks, chunk, chunk + 1, sign * (count - start));
  }

  Scheme scheme_;
  int64_t n_;
  int64_t constant_ = 0;
  std::vector<int64_t> diff_;
};

// Every query's visible keys lie in its own document (attention_shape.h), so the keys of chunk s
// that query q sees are s's positions among the document's first last + 1 offsets less those among
// its first `first` offsets: RankPrefixCounts gives both for every chunk at once, and rank r's
// pairs with each chunk take one pass over r's queries, O(seq_len + cp_size^2) in all, whatever
// the scheme, mask or number of ranks. Fills visible_pairs when count_pairs, and skipped_steps.
void count_visible(const Problem& p, Scheme scheme, bool count_pairs, TokenPlan& plan) {
  const int n = static_cast<int>(p.cp_size);
  const AttentionShape shape = attention_shape_of(p);
  const std::vector<int64_t> bounds = p.documents.empty() ? std::vector<int64_t>{0, p.seq_len} : shape.cu_seqlens;
  plan.skipped_steps = 0;
  std::vector<std::vector<int64_t>> visible(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    RankPrefixCounts chunk_pairs(scheme, n);
    size_t doc = 0;  // the document holding q: positions increase, so it only moves forward
    for (int64_t q : partition_positions(scheme, p.seq_len, n, r, p.documents)) {
      while (bounds[doc + 1] <= q) ++doc;
      const int64_t start = bounds[doc], length = bounds[doc + 1] - start;
      const KeyInterval keys = visible_keys(shape, q);  // unbounded without documents: clipped
      const int64_t first = std::max(keys.first, start), last = std::min(keys.last, start + length - 1);
      if (first > last) continue;
      chunk_pairs.add(length, last + 1 - start, 1);
      chunk_pairs.add(length, first - start, -1);
    }
    const std::vector<int64_t> by_chunk = chunk_pairs.counts();
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
  const std::vector<int64_t> documents = p.documents.empty() ? std::vector<int64_t>{p.seq_len} : p.documents;
  plan.rank_tokens.assign(static_cast<size_t>(n), 0);
  for (int64_t length : documents)
    for (int r = 0; r < n; ++r) plan.rank_tokens[r] += tokens_in_document(scheme, length, n, r);
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
