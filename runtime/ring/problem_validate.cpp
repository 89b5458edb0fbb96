// Problem::validate: the checks every entry point (C++ API, C ABI, command line) runs before
// anything is allocated or compiled, so a bad shape fails with one line naming the field.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cpgen/error.h"
#include "cpgen/problem.h"
#include "generator/kernel_spec.h"
#include "runtime/core/problem_limits.h"
#include "runtime/ring/partition.h"

namespace cpgen {
namespace {

// softcap and softmax_scale run as float32: normal (no flush to 0 in a division), and with room
// for the scale's factor log2(e) below float32's 3.4e38.
constexpr double kMinFloatParameter = 1e-30, kMaxFloatParameter = 1e30;

std::string float_text(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

// A parameter the kernels take as a float32 (softcap, softmax_scale): 0 (zero_means) or in range.
void require_float32_parameter(const std::string& where, const char* name, double value, const char* zero_means) {
  if (value != 0 && (value < kMinFloatParameter || value > kMaxFloatParameter))
    throw_bad_input(where + ": " + name + " " + float_text(value) + " is outside what the kernels' float32 takes; " +
                    "allowed: 0 (" + zero_means + ") or " + float_text(kMinFloatParameter) + " .. " +
                    float_text(kMaxFloatParameter));
}

std::string where(const Problem& p) {
  return p.name.empty() ? std::string("problem") : "problem '" + p.name + "'";
}

void require_positive(const Problem& p, const char* field, int64_t value) {
  if (value < 1)
    throw_bad_input(where(p) + ": " + field + " is " + std::to_string(value) + "; it must be >= 1");
}

template <typename T>
bool listed(std::span<const T> values, T value) {
  for (T v : values)
    if (v == value) return true;
  return false;
}

std::string join(std::span<const int> values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

void require_range(const std::string& where, const char* field, int64_t value, int64_t max) {
  if (value < 1 || value > max) {
    throw_bad_input(where + ": " + field + " must be an integer 1.." + std::to_string(max) + ", got " + std::to_string(value));
  }
}

}  // namespace

void check_problem_mask(const Problem& p, const std::string& where_text) {
  if (static_cast<int64_t>(p.documents.size()) > kMaxDocuments)
    throw_bad_input(where_text + ": documents has " + std::to_string(p.documents.size()) +
                    " entries; at most " + std::to_string(kMaxDocuments) + " are allowed");
  int64_t total = 0;
  for (size_t i = 0; i < p.documents.size(); ++i) {
    const int64_t length = p.documents[i];
    if (length < 0 || length > kMaxSeqLen)
      throw_bad_input(where_text + ": documents[" + std::to_string(i) + "] is " + std::to_string(length) +
                      "; a document length must be an integer 0.." + std::to_string(kMaxSeqLen));
    total += length;
  }
  if (!p.documents.empty() && total != p.seq_len)
    throw_bad_input(where_text + ": documents sum to " + std::to_string(total) + "; they must sum to seq_len " +
                    std::to_string(p.seq_len));
  const std::pair<const char*, int64_t> windows[] = {{"window_left", p.window_left},
                                                     {"window_right", p.window_right}};
  for (const auto& [field, value] : windows)
    if (value < -1 || value > kMaxSeqLen)
      throw_bad_input(where_text + ": " + field + " is " + std::to_string(value) +
                      "; it must be -1 (unbounded) or an integer 0.." + std::to_string(kMaxSeqLen));
  if (!std::isfinite(p.softcap) || p.softcap < 0)
    throw_bad_input(where_text + ": softcap " + std::to_string(p.softcap) +
                    " must be finite and >= 0 (0 means no softcap)");
  // The kernels take it as a float32 and divide by it: 1e39 became inf (every logit NaN), 1e-50
  // became 0 (a division by zero).
  require_float32_parameter(where_text, "softcap", p.softcap, "none");
  if (!p.layout.empty() && p.layout != "bhsd" && p.layout != "bshd" && p.layout != "sbhd" && p.layout != "thd")
    throw_bad_input(where_text + ": layout \"" + p.layout + "\" is not supported; allowed: bhsd, bshd, sbhd, thd");
  if (p.layout == "thd" && p.batch != 1)
    throw_bad_input(where_text + ": layout \"thd\" packs every sequence into one: batch must be 1, got " +
                    std::to_string(p.batch));
}

void check_problem_limits(const Problem& p, const std::string& where) {
  require_range(where, "batch", p.batch, kMaxBatch);
  require_range(where, "q_heads", p.q_heads, kMaxHeads);
  require_range(where, "kv_heads", p.kv_heads, kMaxHeads);
  require_range(where, "seq_len", p.seq_len, kMaxSeqLen);
  require_range(where, "cp_size", p.cp_size, kMaxCpSize);
  // The limits above keep batch * kv_heads far below 2^31 (the int32 pair index of the step
  // kernels' launch; pairs fold over grid.y and grid.z).
}

void check_problem_scale_and_size(const Problem& p, const std::string& where) {
  if (!std::isfinite(p.softmax_scale) || p.softmax_scale < 0)
    throw_bad_input(where + ": softmax_scale " + float_text(p.softmax_scale) +
                    " must be finite and >= 0 (0 means 1/sqrt(head_dim))");
  // A float32 in the kernels, times log2(e) (scale_log2): past 1e38 that overflowed to inf.
  require_float32_parameter(where, "softmax_scale", p.softmax_scale, "1/sqrt(head_dim)");
  // The kernels divide one by the other (scale / softcap): each in range, the quotient may not be.
  if (p.softcap > 0 && p.scale() / p.softcap > kMaxFloatParameter)
    throw_bad_input(where + ": softmax_scale / softcap = " + float_text(p.scale() / p.softcap) +
                    " is outside what the kernels' float32 takes; allowed: up to " + float_text(kMaxFloatParameter));
  // Each factor is range-checked (check_problem_limits), so the product fits in 128 bits.
  const auto elements = static_cast<unsigned __int128>(p.batch) * static_cast<unsigned __int128>(p.q_heads) *
                        static_cast<unsigned __int128>(p.seq_len) * static_cast<unsigned __int128>(p.head_dim);
  if (elements > static_cast<unsigned __int128>(kMaxShapeElements))
    throw_bad_input(where + ": batch * q_heads * seq_len * head_dim exceeds 2^48 elements; reduce batch or seq_len");
  // The step kernels' launch limit, checked here so that no problem fails only at its first
  // launch (templates/layout.cuh): a kv head's packed query rows (the rank's tokens * group) are
  // int32 row indices, and a block's rows run up to block_m past the last one: 2^30 leaves room
  // for any block. The rank that holds the most tokens counts: with documents or an uneven split
  // that is more than seq_len / cp_size.
  const int64_t group = p.q_heads / p.kv_heads;
  const std::vector<int64_t> rows =
      partition_rows_all(p.scheme, p.seq_len, static_cast<int>(p.cp_size), p.documents);
  const auto most = std::max_element(rows.begin(), rows.end());
  if (most != rows.end() && *most * group > kMaxPackedRows)
    throw_bad_input(where + ": rank " + std::to_string(most - rows.begin()) + " holds " + std::to_string(*most) +
                    " tokens, times the GQA group " + std::to_string(group) + " = " + std::to_string(*most * group) +
                    " packed query rows, above the supported maximum 2^30 (the step kernel's packed row "
                    "indices are 32-bit)");
}

void Problem::validate() const {
  check_problem_limits(*this, where(*this));
  require_positive(*this, "head_dim", head_dim);
  if (q_heads % kv_heads != 0)
    throw_bad_input(where(*this) + ": q_heads " + std::to_string(q_heads) +
                    " is not a multiple of kv_heads " + std::to_string(kv_heads));
  if (!listed<int>(kSupportedHeadDims, static_cast<int>(head_dim)) || head_dim > 1024)
    throw_bad_input(where(*this) + ": head_dim " + std::to_string(head_dim) +
                    " is not supported; allowed: " + join(kSupportedHeadDims));
  const int64_t group = gqa_group();
  if (group > 1024 || !listed<int>(kSupportedGqaGroups, static_cast<int>(group)))
    throw_bad_input(where(*this) + ": q_heads / kv_heads = " + std::to_string(group) +
                    " is not a supported GQA group; allowed: " + join(kSupportedGqaGroups));
  check_problem_mask(*this, where(*this));
  check_problem_scale_and_size(*this, where(*this));
}

}  // namespace cpgen
