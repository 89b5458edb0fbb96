// The planner's view of packed and masked problems (issue 11): how many tokens each rank holds
// when documents or lengths do not divide, and how many ring steps the mask leaves with no work
// at all (a step whose K/V chunk no local query sees launches nothing).
#pragma once

#include <cstdint>
#include <vector>

#include "cpgen/problem.h"

namespace cpgen {

// Past this many tokens the visible pairs and skipped steps of a masked problem (documents or a
// window) are not counted (the count visits each query once: about 4 s for plan's four schemes at
// this length on the development machine, any cp_size): reported as -1. Plain causal and full
// problems are counted in closed form at any length.
inline constexpr int64_t kMaxSkipCountTokens = int64_t{1} << 26;

struct TokenPlan {
  std::vector<int64_t> rank_tokens;  // per rank, from the partition of each document
  double token_imbalance = 1;        // most tokens on a rank / mean; 1 is perfect
  int64_t ring_steps = 0;            // cp_size * cp_size (rank, step) pairs of a forward pass
  int64_t skipped_steps = -1;        // of those, whose chunk no local query sees; -1: not counted
  // [rank][step]: the (query position, key position) pairs of rank's queries and the chunk it
  // holds at that step that the mask leaves visible, per batch entry and query head. Empty: not
  // counted. A step is skipped exactly when its count is 0.
  std::vector<std::vector<int64_t>> visible_pairs;
};

// Closed-form token counts (any seq_len), and the visible pairs and skipped steps under the
// problem's mask model (runtime/core/attention_shape.h) when seq_len <= kMaxSkipCountTokens:
// one pass over the documents' queries, every chunk's pairs at once (O(seq_len + documents +
// cp_size^2)).
// count_pairs false: the skipped steps only, and visible_pairs stays empty: what the planner
// needs when it counts work in tiles.
TokenPlan plan_tokens(const Problem& problem, Scheme scheme, bool count_pairs = true);

// The skipped steps by visiting every query (any mask, any scheme), and whether
// plan_tokens counts them in closed form instead (one document, no window);
// exposed so tests can hold the two against each other.
int64_t count_skipped_steps(const Problem& problem, Scheme scheme);
bool plan_counts_steps_in_closed_form(const Problem& problem, Scheme scheme);

}  // namespace cpgen
