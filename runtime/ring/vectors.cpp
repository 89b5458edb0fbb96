#include "runtime/ring/vectors.h"

#include <nlohmann/json.hpp>

#include <cmath>

#include "cpgen/error.h"
#include "runtime/core/problem_limits.h"
#include "runtime/core/json_text.h"
#include "runtime/core/text_file.h"

namespace cpgen {
namespace {

using nlohmann::json;

const json& field(const json& doc, const std::string& source, const char* name) {
  auto it = doc.find(name);
  if (it == doc.end())
    throw_bad_input(source + ": not a vectors file: field '" + name + "' is missing");
  return *it;
}

// Format 1's window: null or w >= 1, masking i - j >= w (a left window of w - 1).
int64_t format1_window_left(const json& doc, const std::string& source) {
  const json& window = field(doc, source, "window");
  if (!window.is_null() && !(window.is_number_integer() && window.get<int64_t>() >= 1))
    throw_bad_input(source + ": field 'window' must be null or a positive integer; got " +
                    window.dump());
  return window.is_null() ? -1 : window.get<int64_t>() - 1;
}

// Format 2's window side: null (unbounded, -1) or an integer >= 0.
int64_t window_side(const json& window, const std::string& source, const char* side) {
  auto it = window.find(side);
  if (it == window.end() || it->is_null()) return -1;
  if (!it->is_number_integer() || it->get<int64_t>() < 0)
    throw_bad_input(source + ": field 'window." + side + "' must be null or an integer >= 0; got " +
                    it->dump());
  return it->get<int64_t>();
}

// Format 2's mask: documents (lengths summing to seq_len), window {left, right}, softcap.
void read_format2_mask(const json& doc, const std::string& source, AttentionVectors& v) {
  const json& documents = field(doc, source, "documents");
  if (!documents.is_array() || documents.empty())
    throw_bad_input(source + ": field 'documents' must be a non-empty array of lengths >= 0");
  std::vector<int64_t> lengths;
  int64_t total = 0;
  for (const json& length : documents) {
    if (!length.is_number_integer() || length.get<int64_t>() < 0 || length.get<int64_t>() > v.seq_len)
      throw_bad_input(source + ": field 'documents' holds " + length.dump() +
                      "; a length must be an integer 0.." + std::to_string(v.seq_len));
    lengths.push_back(length.get<int64_t>());
    total += lengths.back();
  }
  if (total != v.seq_len)
    throw_bad_input(source + ": field 'documents' sums to " + std::to_string(total) +
                    "; it must sum to seq_len " + std::to_string(v.seq_len));
  v.shape.cu_seqlens = cu_seqlens_of(lengths);
  const json& window = field(doc, source, "window");
  if (!window.is_null() && !window.is_object())
    throw_bad_input(source + ": field 'window' must be null or {\"left\": L, \"right\": R}; got " +
                    window.dump());
  if (window.is_object()) {
    v.shape.window_left = window_side(window, source, "left");
    v.shape.window_right = window_side(window, source, "right");
  }
  const json& softcap = field(doc, source, "softcap");
  if (!softcap.is_null() && !(softcap.is_number() && softcap.get<double>() > 0))
    throw_bad_input(source + ": field 'softcap' must be null or a number > 0; got " + softcap.dump());
  v.shape.softcap = softcap.is_null() ? 0 : softcap.get<double>();
}

int64_t positive_int(const json& doc, const std::string& source, const char* name) {
  const json& value = field(doc, source, name);
  if (!value.is_number_integer() || value.get<int64_t>() < 1)
    throw_bad_input(source + ": field '" + name + "' must be a positive integer; got " +
                    value.dump());
  return value.get<int64_t>();
}

std::vector<double> tensor(const json& doc, const std::string& source, const char* name,
                           int64_t expected_size) {
  const json& value = field(doc, source, name);
  if (!value.is_array())
    throw_bad_input(source + ": field '" + name + "' must be an array of numbers");
  if (static_cast<int64_t>(value.size()) != expected_size)
    throw_bad_input(source + ": field '" + name + "' has " + std::to_string(value.size()) +
                    " elements; the problem fields need " + std::to_string(expected_size));
  std::vector<double> data;
  data.reserve(value.size());
  for (const json& x : value) {
    if (!x.is_number())
      throw_bad_input(source + ": field '" + name + "' holds a non-number: " + x.dump());
    data.push_back(x.get<double>());
  }
  return data;
}

template <typename T>
double relative_error_impl(const std::vector<T>& actual, const std::vector<double>& expected) {
  if (actual.size() != expected.size())
    throw Error(ErrorKind::kInternal, "relative_error: sizes differ (" +
                                          std::to_string(actual.size()) + " vs " +
                                          std::to_string(expected.size()) + ")");
  double diff = 0, norm = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double e = static_cast<double>(actual[i]) - expected[i];
    diff += e * e;
    norm += expected[i] * expected[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

}  // namespace

AttentionVectors parse_attention_vectors(const std::string& text, const std::string& source) {
  refuse_nul_byte(text, source, "a vectors file");
  const json doc = parse_json_text(text, source, kMaxJsonDepth);
  if (!doc.is_object()) throw_bad_input(source + ": not a vectors file: top level is not an object");
  const json& format = field(doc, source, "format");
  AttentionVectors v;
  if (format == kAttentionVectorsFormat) {
    v.format = 1;
  } else if (format == kAttentionVectorsFormat2) {
    v.format = 2;
  } else {
    throw_bad_input(source + ": format is " + format.dump() + "; expected \"" +
                    kAttentionVectorsFormat + "\" or \"" + kAttentionVectorsFormat2 + "\"");
  }
  const json& name = field(doc, source, "name");
  v.name = name.is_string() ? name.get<std::string>() : name.dump();
  v.shape.batch = positive_int(doc, source, "batch");
  v.shape.q_heads = positive_int(doc, source, "q_heads");
  v.shape.kv_heads = positive_int(doc, source, "kv_heads");
  v.shape.head_dim = positive_int(doc, source, "head_dim");
  v.seq_len = positive_int(doc, source, "seq_len");
  if (v.shape.q_heads % v.shape.kv_heads != 0)
    throw_bad_input(source + ": q_heads (" + std::to_string(v.shape.q_heads) +
                    ") is not a multiple of kv_heads (" + std::to_string(v.shape.kv_heads) + ")");
  const json& causal = field(doc, source, "causal");
  if (!causal.is_boolean()) throw_bad_input(source + ": field 'causal' must be true or false");
  v.shape.causal = causal.get<bool>();
  if (v.format == 1)
    v.shape.window_left = format1_window_left(doc, source);
  else
    read_format2_mask(doc, source, v);
  const json& scale = field(doc, source, "softmax_scale");
  if (!scale.is_number() || !(scale.get<double>() > 0))
    throw_bad_input(source + ": field 'softmax_scale' must be a positive number; got " +
                    scale.dump());
  v.shape.scale = scale.get<double>();

  // The sizes, mask and scale within the problem model's bounds (batch up to 65536, heads up to
  // 1024, window sides up to 2^30, at most 2^20 documents, a softcap and a scale that float32
  // takes, at most 2^48 elements), as a problem arriving any other way is checked: a window side
  // of 2^63 - 1 overflowed in the visibility (verify said FAIL, exit 1), and a batch past 65536
  // passed this reader. Before the tensors, which may be most of a 1 GiB file.
  const Problem p = problem_from_vectors(v, 1, Scheme::kContiguous, Dtype::kBf16);
  check_problem_limits(p, source);
  check_problem_mask(p, source);
  check_problem_scale_and_size(p, source);
  // No product overflows: at most 2^48 elements (check_problem_scale_and_size), kv_heads at most
  // q_heads. A tensor's every element takes two bytes of text at least, so no file of
  // kMaxVectorsFileBytes holds more than half that many.
  const auto elements = [&](int64_t heads) {
    const int64_t n = v.shape.batch * heads * v.seq_len * v.shape.head_dim;
    if (n > static_cast<int64_t>(kMaxVectorsFileBytes / 2))
      throw_bad_input(source + ": batch * heads * seq_len * head_dim is more elements than a vectors file holds (at most " +
                      std::to_string(kMaxVectorsFileBytes / 2) + ")");
    return n;
  };
  const int64_t q_size = elements(v.shape.q_heads);
  const int64_t kv_size = elements(v.shape.kv_heads);
  v.q = tensor(doc, source, "q", q_size);
  v.k = tensor(doc, source, "k", kv_size);
  v.v = tensor(doc, source, "v", kv_size);
  v.dout = tensor(doc, source, "dout", q_size);
  v.out = tensor(doc, source, "out", q_size);
  v.lse = tensor(doc, source, "lse", v.shape.batch * v.shape.q_heads * v.seq_len);
  v.dq = tensor(doc, source, "dq", q_size);
  v.dk = tensor(doc, source, "dk", kv_size);
  v.dv = tensor(doc, source, "dv", kv_size);
  return v;
}

AttentionVectors load_attention_vectors(const std::string& path) {
  return parse_attention_vectors(read_text_file(path, path, "a vectors file", kMaxVectorsFileBytes), path);
}

double relative_error(const std::vector<double>& actual, const std::vector<double>& expected) {
  return relative_error_impl(actual, expected);
}
double relative_error(const std::vector<float>& actual, const std::vector<double>& expected) {
  return relative_error_impl(actual, expected);
}

Problem problem_from_vectors(const AttentionVectors& vec, int64_t cp_size, Scheme scheme, Dtype dtype) {
  Problem p;
  p.name = vec.name;
  p.batch = vec.shape.batch;
  p.q_heads = vec.shape.q_heads;
  p.kv_heads = vec.shape.kv_heads;
  p.head_dim = vec.shape.head_dim;
  p.seq_len = vec.seq_len;
  p.causal = vec.shape.causal;
  p.softmax_scale = vec.shape.scale;
  p.window_left = vec.shape.window_left;
  p.window_right = vec.shape.window_right;
  p.softcap = vec.shape.softcap;
  for (size_t i = 1; i < vec.shape.cu_seqlens.size(); ++i)
    p.documents.push_back(vec.shape.cu_seqlens[i] - vec.shape.cu_seqlens[i - 1]);
  p.cp_size = cp_size;
  p.scheme = scheme;
  p.dtype = dtype;
  return p;
}

}  // namespace cpgen
