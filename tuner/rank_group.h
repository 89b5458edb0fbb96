// The ranks of a multi-rank tuning job. Every rank compiles; rank 0 alone times and decides the
// winners, then broadcasts them, so no rank can end up running a different kernel from the
// others because its own timings came out differently.
#pragma once

#include <string>

namespace cpgen {

class RankGroup {
 public:
  virtual ~RankGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Collective: every rank calls it in the same order; returns rank 0's `bytes` on every rank.
  virtual std::string broadcast_from_root(const std::string& bytes) = 0;
};

}  // namespace cpgen
