// Row counts of a partition's ranks, all at once, from closed forms of the split each scheme makes
// of one document (runtime/ring/partition.h): the counts that partition_rows_all sums over whole
// documents and the planner over the prefixes that bound each query's visible keys. Inline: the
// planner calls them once or twice per token.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cpgen/error.h"
#include "cpgen/types.h"

namespace cpgen {

// Rows per rank of prefixes of documents, all ranks at once: add_prefix(length, count, sign) adds
// `sign` times the rows each rank holds among the first `count` offsets (0 <= count <= length) of a
// document of `length` tokens, split as partition_positions splits each document. Every scheme's
// count is one share for all ranks plus at most a few rank ranges, so an add is O(1) and counts()
// O(cp_size). partition_rows_all adds whole documents; the planner adds the prefixes that bound
// each query's visible keys (runtime/ring/plan_tokens.cpp).
class RankRowCounts {
 public:
  RankRowCounts(Scheme scheme, int cp_size);  // throws kBadInput for cp_size < 1
  void add_prefix(int64_t length, int64_t count, int64_t sign);
  std::vector<int64_t> counts() const;        // [cp_size]

 private:
  void add_ranks(int64_t first, int64_t past, int64_t value);
  void add_chunk_range(int64_t chunks, int64_t first, int64_t past, int64_t value);
  void add_chunks(int64_t length, int64_t chunks, int64_t count, int64_t sign);

  Scheme scheme_;
  int64_t n_;
  int64_t common_ = 0;
  std::vector<int64_t> diff_;  // rank r's count: common_ + diff_[0] + ... + diff_[r]
};

// A document of `length` tokens cut into `chunks` chunks (contiguous: one per rank; zigzag: two),
// sizes length / chunks, the first length % chunks one token longer: the first offset of chunk
// `chunk` (0 <= chunk <= chunks; chunk `chunks` gives length), and the chunk holding offset
// `offset` (0 <= offset < length).
int64_t chunk_first_offset(int64_t length, int64_t chunks, int64_t chunk);
int64_t chunk_of_offset(int64_t length, int64_t chunks, int64_t offset);
// The rank that holds offset `offset` (0 <= offset < length) of a document of `length` tokens:
// the document's own split (partition_positions), whatever the documents around it.
int document_offset_owner(Scheme scheme, int64_t length, int cp_size, int64_t offset);

inline RankRowCounts::RankRowCounts(Scheme scheme, int cp_size) : scheme_(scheme), n_(cp_size) {
  if (cp_size < 1)
    throw_bad_input(std::string(scheme_name(scheme)) + " needs cp_size >= 1; got " + std::to_string(cp_size));
  diff_.assign(static_cast<size_t>(n_) + 1, 0);
}

inline void RankRowCounts::add_ranks(int64_t first, int64_t past, int64_t value) {
  first = std::max<int64_t>(first, 0);
  past = std::min(past, n_);
  if (first >= past) return;
  diff_[static_cast<size_t>(first)] += value;
  diff_[static_cast<size_t>(past)] -= value;
}

inline void RankRowCounts::add_chunk_range(int64_t chunks, int64_t first, int64_t past, int64_t value) {
  if (chunks == n_) return add_ranks(first, past, value);
  // Zigzag: chunk c < n on rank c, chunk c >= n on rank 2n - 1 - c.
  add_ranks(first, std::min(past, n_), value);
  const int64_t high = std::max(first, n_);
  if (high < past) add_ranks(2 * n_ - past, 2 * n_ - high, value);
}

inline void RankRowCounts::add_chunks(int64_t length, int64_t chunks, int64_t count, int64_t sign) {
  // Chunk sizes length / chunks, the first length % chunks one longer (append_chunk): the whole
  // chunks before the one holding offset count - 1, and that one's share.
  const int64_t base = length / chunks, longer = length % chunks;
  const int64_t chunk = chunk_of_offset(length, chunks, count - 1);
  add_chunk_range(chunks, 0, chunk, sign * base);
  add_chunk_range(chunks, 0, std::min(chunk, longer), sign);
  add_chunk_range(chunks, chunk, chunk + 1, sign * (count - chunk_first_offset(length, chunks, chunk)));
}

inline void RankRowCounts::add_prefix(int64_t length, int64_t count, int64_t sign) {
  if (count <= 0) return;
  switch (scheme_) {
    case Scheme::kContiguous: add_chunks(length, n_, count, sign); return;
    case Scheme::kZigzag: add_chunks(length, 2 * n_, count, sign); return;
    case Scheme::kStriped:
      // Offsets r, r + n, ...: one per whole group of n, and the short group's first count % n
      // offsets go to ranks 0 .. count % n - 1.
      common_ += sign * (count / n_);
      add_ranks(0, count % n_, sign);
      return;
    case Scheme::kZigzagToken: {
      // One per whole fold; the short fold f = count / n holds offsets 0 .. m - 1, rank r's offset
      // being r in an even fold and n - 1 - r in an odd one.
      const int64_t fold = count / n_, m = count % n_;
      common_ += sign * fold;
      if (fold % 2 == 0) add_ranks(0, m, sign);
      else add_ranks(n_ - m, n_, sign);
      return;
    }
  }
  throw Error(ErrorKind::kInternal, "partition: unknown scheme value " + std::to_string(static_cast<int>(scheme_)));
}

inline std::vector<int64_t> RankRowCounts::counts() const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  int64_t running = common_;
  for (int64_t r = 0; r < n_; ++r) out[static_cast<size_t>(r)] = running += diff_[static_cast<size_t>(r)];
  return out;
}

inline int64_t chunk_first_offset(int64_t length, int64_t chunks, int64_t chunk) {
  return chunk * (length / chunks) + std::min(chunk, length % chunks);
}

inline int64_t chunk_of_offset(int64_t length, int64_t chunks, int64_t offset) {
  const int64_t base = length / chunks, longer = length % chunks, boundary = longer * (base + 1);
  return offset < boundary ? offset / (base + 1) : longer + (offset - boundary) / base;
}

inline int document_offset_owner(Scheme scheme, int64_t length, int cp_size, int64_t offset) {
  const int64_t n = cp_size;
  switch (scheme) {
    case Scheme::kContiguous: return static_cast<int>(chunk_of_offset(length, n, offset));
    case Scheme::kZigzag: {
      const int64_t chunk = chunk_of_offset(length, 2 * n, offset);
      return static_cast<int>(chunk < n ? chunk : 2 * n - 1 - chunk);
    }
    case Scheme::kZigzagToken: {
      const int64_t fold = offset / n, at = offset % n;
      return static_cast<int>(fold % 2 == 0 ? at : n - 1 - at);
    }
    case Scheme::kStriped: return static_cast<int>(offset % n);
  }
  throw Error(ErrorKind::kInternal, "partition: unknown scheme value " + std::to_string(static_cast<int>(scheme)));
}

}  // namespace cpgen
