// Problem::validate: the checks every entry point (C++ API, C ABI, command line) runs before
// anything is allocated or compiled, so a bad shape fails with one line naming the field.
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <utility>

#include "cpgen/error.h"
#include "cpgen/problem.h"
#include "generator/kernel_spec.h"
#include "runtime/core/problem_limits.h"

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
  // The step kernels' launch limits, checked here so that no problem fails only at its first
  // launch (templates/step_fwd.cuh, templates/layout.cuh). The limits above keep batch *
  // kv_heads far below 2^31 (the int32 pair index; pairs fold over grid.y and grid.z). A kv head's
  // packed query rows (local_seq_len * group, layout.cuh) are int32 row indices, and a block's rows
  // run up to block_m past the last one: 2^30 leaves room for any block.
  if (p.kv_heads > 0 && p.q_heads % p.kv_heads == 0 && p.seq_len / p.cp_size * (p.q_heads / p.kv_heads) > kMaxPackedRows)
    throw_bad_input(where + ": seq_len / cp_size * (q_heads / kv_heads) = " + std::to_string(p.seq_len / p.cp_size) +
                    " * " + std::to_string(p.q_heads / p.kv_heads) +
                    " packed query rows per rank exceeds the supported maximum 2^30 (the step "
                    "kernel's packed row indices are 32-bit)");
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
  if (!std::isfinite(softmax_scale) || softmax_scale < 0)
    throw_bad_input(where(*this) + ": softmax_scale " + std::to_string(softmax_scale) +
                    " must be finite and >= 0 (0 means 1/sqrt(head_dim))");
  // A float32 in the kernels, times log2(e) (scale_log2): past 1e38 that overflowed to inf.
  require_float32_parameter(where(*this), "softmax_scale", softmax_scale, "1/sqrt(head_dim)");
  check_problem_mask(*this, where(*this));
  // The kernels divide one by the other (scale / softcap): each in range, the quotient may not be.
  if (softcap > 0 && scale() / softcap > kMaxFloatParameter)
    throw_bad_input(where(*this) + ": softmax_scale / softcap = " + float_text(scale() / softcap) +
                    " is outside what the kernels' float32 takes; allowed: up to " + float_text(kMaxFloatParameter));
}

}  // namespace cpgen
