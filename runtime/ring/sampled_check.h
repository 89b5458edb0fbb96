// Checking a ring on random inputs without a full float64 reference: inputs drawn from a seed,
// a sample of query (and key) rows, and the float64 reference on those rows only. Used by
// `cpgen verify --shape '{...}' --random`, so a user's own shape (128K tokens included) is
// checked in seconds on the CPU while the backend still runs the whole problem.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cpgen/problem.h"
#include "runtime/ring/vectors.h"

namespace cpgen {

inline constexpr int64_t kDefaultSampleRows = 256;  // per (batch, head)
inline constexpr uint64_t kDefaultRandomSeed = 12;

// The shape's inputs (q, k, v, dout) drawn from `seed`, in global position order, with the
// problem's whole shape and mask (format 2); the expected tensors stay empty. Every value is a multiple of 1/32 in [-4, 4], so it is exact in bf16 and
// fp16 and every backend starts from the same numbers. The same (problem, seed) gives the same
// bits on every machine (a counter-based generator, no std:: distributions).
AttentionVectors random_vectors(const Problem& problem, uint64_t seed);
// The draw behind it: `count` values n / denominator, n in [-half_steps, half_steps], each from
// a counter-based hash of (seed, tensor_id, index), filled in parallel over the hardware threads;
// the same bits on every machine and thread count. The tuner's inputs use it too.
std::vector<double> grid_draw(uint64_t seed, uint64_t tensor_id, int64_t count, int half_steps, int denominator);

// One element of that draw: step(i) is the n of element i, so grid_draw's value i is
// step(i) / denominator. For a caller that wants some elements only, or the values in another
// form (the tuner writes 16-bit inputs from the steps without making doubles first).
class GridDraw {
 public:
  GridDraw(uint64_t seed, uint64_t tensor_id, int half_steps)
      : stream_(mix(seed ^ mix(tensor_id))), steps_(static_cast<uint64_t>(2 * half_steps + 1)), half_steps_(half_steps) {}
  int step(int64_t i) const {
    return static_cast<int>(mix(stream_ + static_cast<uint64_t>(i)) % steps_) - half_steps_;
  }

 private:
  // splitmix64: a counter-based hash, so element i of a tensor does not depend on how many
  // values were drawn before it (and the draw is the same on every platform).
  static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }

  uint64_t stream_, steps_;  // steps_: -half_steps .. half_steps
  int half_steps_;
};

// Which sequence positions are checked: the first and last position of every rank's shard (in
// its local order; with `documents`, the problem's, each document split on its own), then
// positions spread evenly over the sequence, up to max_rows in all (or every position when
// seq_len <= max_rows). Sorted, without repeats.
std::vector<int64_t> sample_positions(Scheme scheme, int64_t seq_len, int cp_size, int64_t max_rows,
                                      const std::vector<int64_t>& documents);

// Float64 reference at the sampled positions: out, lse, dq of every (batch, q head) at those
// query positions; dk, dv of every (batch, kv head) at those key positions. Gradients only when
// with_grads (dk and dv need lse and rowsum(dO * O) of every query row that sees the key).
struct SampledReference {
  std::vector<int64_t> positions;
  int64_t q_rows = 0, kv_rows = 0;  // batch * q_heads, batch * kv_heads
  int64_t head_dim = 0;
  int64_t seq_len = 0;
  // [row][sample][head_dim] (lse: [row][sample]), row = b * heads + h.
  std::vector<double> out, lse, dq, dk, dv;
};
SampledReference sampled_reference(const AttentionVectors& inputs, std::vector<int64_t> positions,
                                   bool with_grads);

// Errors of a gathered full tensor ("out", "lse", "dq", "dk", "dv"; [row][seq][head_dim] in
// global order) over the sampled positions: ||got - want||_F / ||want||_F, and max |got - want|
// (an lse of -inf matches -inf). NaN anywhere gives NaN. Throws Error(kInternal) for a tensor
// the reference does not hold or a size that does not match.
double sampled_relative_error(const SampledReference& ref, const std::string& tensor,
                              const std::vector<float>& got);
double sampled_max_abs_error(const SampledReference& ref, const std::string& tensor,
                             const std::vector<float>& got);

}  // namespace cpgen
