#include "tuner/step_inputs.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>

#include "cpgen/error.h"
#include "runtime/core/half_convert.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/sampled_check.h"
#include "tuner/parallel_for.h"

namespace cpgen {
namespace {

std::vector<int> range(int64_t first, int64_t count) {
  std::vector<int> out(count);
  std::iota(out.begin(), out.end(), static_cast<int>(first));
  return out;
}

}  // namespace

StepPositions step_positions(const WorkloadKey& w) {
  StepPositions pos;
  // A backward step type has its forward counterpart's shape.
  const StepType shape = forward_shape(w.step);
  const int64_t l = shape == StepType::kZigzagQHalf ? w.kv_len : w.q_len;  // the local length
  const int64_t half = l / 2;
  switch (shape) {
    case StepType::kDiagonal: {
      std::vector<int64_t> own;
      try {
        check_partitionable(w.scheme, 2 * l, 2);
        own = partition_positions(w.scheme, 2 * l, 2, 0, {});
      } catch (const Error&) {
        // A length the scheme cannot split over two ranks: time the contiguous triangle.
        own.resize(l);
        std::iota(own.begin(), own.end(), 0);
      }
      pos.q.assign(own.begin(), own.end());
      pos.kv = pos.q;
      break;
    }
    case StepType::kFull:
      pos.q = range(l, w.q_len);
      pos.kv = range(0, w.kv_len);
      break;
    case StepType::kZigzagKvHalf:
      pos.q = range(half, w.q_len);
      pos.kv = range(0, w.kv_len);
      break;
    case StepType::kZigzagQHalf:
      pos.q = range(3 * half, w.q_len);
      pos.kv = range(half, w.kv_len);
      break;
    default:
      throw Error(ErrorKind::kInternal, "step_positions: unhandled step type " +
                                            std::string(step_type_name(w.step)));
  }
  if (static_cast<int64_t>(pos.q.size()) != w.q_len || static_cast<int64_t>(pos.kv.size()) != w.kv_len) {
    throw Error(ErrorKind::kInternal, "step_positions: lengths disagree with " + w.describe());
  }
  return pos;
}

AttentionShape step_mask(const WorkloadKey& w, const StepPositions& pos) {
  AttentionShape mask;
  mask.batch = w.batch;
  mask.q_heads = w.q_heads;
  mask.kv_heads = w.kv_heads;
  mask.head_dim = w.head_dim;
  mask.scale = 1.0 / std::sqrt(static_cast<double>(w.head_dim));
  mask.causal = w.causal;
  mask.window_left = w.mask.window_left;
  mask.window_right = w.mask.window_right;
  mask.softcap = w.mask.softcap ? kTuneSoftcap : 0.0;
  if (w.mask.document_len > 0) {
    int64_t span = 0;
    for (const std::vector<int>* list : {&pos.q, &pos.kv})
      if (!list->empty()) span = std::max<int64_t>(span, list->back() + 1);
    mask.cu_seqlens.push_back(0);
    while (mask.cu_seqlens.back() < span) mask.cu_seqlens.push_back(std::min(mask.cu_seqlens.back() + w.mask.document_len, span));
    if (mask.cu_seqlens.size() == 1) mask.cu_seqlens.push_back(0);
  }
  return mask;
}

AttentionShape forward_timing_mask(const WorkloadKey& w, const StepPositions& pos) {
  AttentionShape mask = step_mask(w, pos);
  if (!w.mask.softcap) mask.scale = kForwardLogitScale / std::sqrt(static_cast<double>(w.head_dim));
  return mask;
}

StepKeyIntervals step_key_intervals(const AttentionShape& mask, const StepPositions& pos) {
  StepKeyIntervals out;
  out.first.reserve(pos.q.size());
  out.last.reserve(pos.q.size());
  for (int q : pos.q) {
    const KeyInterval keys = visible_keys(mask, q);
    out.first.push_back(static_cast<int>(std::clamp<int64_t>(keys.first, 0, std::numeric_limits<int32_t>::max())));
    out.last.push_back(static_cast<int>(std::clamp<int64_t>(keys.last, -1, std::numeric_limits<int32_t>::max())));
  }
  return out;
}

namespace {

// The bits of `value` in the 16-bit type, or nothing where it is not exact there (or in fp32).
std::optional<uint16_t> exact_bits(double value, Dtype dtype) {
  const float f = static_cast<float>(value);
  if (static_cast<double>(f) != value) return std::nullopt;
  // The runtime's round-to-nearest-even conversion; exact means it round-trips.
  const uint16_t bits = dtype == Dtype::kBf16 ? float_to_bf16(f) : float_to_fp16(f);
  if (decode_16(bits, dtype) != f) return std::nullopt;
  return bits;
}

}  // namespace

uint16_t encode_exact(double value, Dtype dtype) {
  if (static_cast<double>(static_cast<float>(value)) != value)
    throw Error(ErrorKind::kInternal, "encode_exact: value not exact in fp32");
  const std::optional<uint16_t> bits = exact_bits(value, dtype);
  if (!bits) throw Error(ErrorKind::kInternal, std::string("encode_exact: value not exact in ") + std::string(dtype_name(dtype)));
  return *bits;
}

double decode_16(uint16_t bits, Dtype dtype) {
  return dtype == Dtype::kBf16 ? bf16_to_float(bits) : fp16_to_float(bits);
}

namespace {

constexpr int kGridHalfSteps = 64, kGridDenominator = 64;  // values k/64, |k| <= 64

}  // namespace

std::vector<double> grid_values(uint64_t seed, uint64_t tensor_id, size_t count) {
  return grid_draw(seed, tensor_id, static_cast<int64_t>(count), kGridHalfSteps, kGridDenominator);
}

uint64_t timing_seed(const WorkloadKey& w) {
  return 0x5eed + static_cast<uint64_t>(w.q_len) * 131 + static_cast<uint64_t>(w.head_dim);
}

std::vector<double> grid_values_at(uint64_t seed, uint64_t tensor_id, size_t first, size_t count) {
  const GridDraw draw(seed, tensor_id, kGridHalfSteps);
  std::vector<double> values(count);
  for (size_t i = 0; i < count; ++i)
    values[i] = static_cast<double>(draw.step(static_cast<int64_t>(first + i))) / kGridDenominator;
  return values;
}

std::vector<uint16_t> grid_bits(uint64_t seed, uint64_t tensor_id, size_t count, Dtype dtype) {
  uint16_t bits_of[2 * kGridHalfSteps + 1];
  for (int n = -kGridHalfSteps; n <= kGridHalfSteps; ++n)
    bits_of[n + kGridHalfSteps] = encode_exact(static_cast<double>(n) / kGridDenominator, dtype);
  const GridDraw draw(seed, tensor_id, kGridHalfSteps);
  std::vector<uint16_t> bits(count);
  parallel_ranges(static_cast<int64_t>(count), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) bits[static_cast<size_t>(i)] = bits_of[draw.step(i) + kGridHalfSteps];
  });
  return bits;
}

int64_t visible_pairs(const StepPositions& pos, bool causal) {
  if (!causal) return static_cast<int64_t>(pos.q.size()) * static_cast<int64_t>(pos.kv.size());
  // Both lists increase, so the visible keys of successive queries form growing prefixes.
  int64_t total = 0;
  size_t visible = 0;
  for (int q : pos.q) {
    while (visible < pos.kv.size() && pos.kv[visible] <= q) ++visible;
    total += static_cast<int64_t>(visible);
  }
  return total;
}

int64_t visible_pairs(const StepPositions& pos, const AttentionShape& mask) {
  int64_t total = 0;
  for (int q : pos.q) {
    const KeyInterval keys = visible_keys(mask, q);
    // pos.kv increases, so the keys inside the interval are one run of it.
    const auto begin = std::lower_bound(pos.kv.begin(), pos.kv.end(), keys.first);
    const auto end = std::upper_bound(begin, pos.kv.end(), keys.last);
    total += end - begin;
  }
  return total;
}

void reference_row(const double* q_row, const double* k, const double* v, int64_t kv_len, int head_dim, double scale,
                   int q_position, const std::vector<int>& kv_positions, bool causal, double* out, double* lse) {
  AttentionShape mask;
  mask.scale = scale;
  mask.causal = causal;
  reference_row(q_row, k, v, kv_len, head_dim, mask, q_position, kv_positions, out, lse);
}

void reference_row(const double* q_row, const double* k, const double* v, int64_t kv_len, int head_dim,
                   const AttentionShape& mask, int q_position, const std::vector<int>& kv_positions, double* out,
                   double* lse) {
  std::vector<double> scores;
  std::vector<int64_t> keys;
  double max_score = -std::numeric_limits<double>::infinity();
  const KeyInterval visible = visible_keys(mask, q_position);
  for (int64_t j = 0; j < kv_len; ++j) {
    if (!visible.contains(kv_positions[j])) continue;
    double s = 0;
    for (int d = 0; d < head_dim; ++d) s += q_row[d] * k[j * head_dim + d];
    s = attention_logit(mask, s);
    scores.push_back(s);
    keys.push_back(j);
    max_score = std::max(max_score, s);
  }
  std::fill(out, out + head_dim, 0.0);
  if (keys.empty()) {
    *lse = -std::numeric_limits<double>::infinity();
    return;
  }
  double sum = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const double p = std::exp(scores[i] - max_score);
    sum += p;
    for (int d = 0; d < head_dim; ++d) out[d] += p * v[keys[i] * head_dim + d];
  }
  for (int d = 0; d < head_dim; ++d) out[d] /= sum;
  *lse = max_score + std::log(sum);
}

}  // namespace cpgen
