#include "runtime/ring/shapes.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <span>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cpgen/error.h"
#include "generator/kernel_spec.h"
#include "runtime/core/json_text.h"
#include "runtime/core/text_file.h"
#include "runtime/ring/partition.h"

namespace cpgen {
namespace {

using Json = nlohmann::json;

std::string join(std::span<const int> values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

// What a JSON value is, for "got ..." in messages; never the value itself when it may be large.
std::string describe(const Json& value) {
  if (value.is_number_float()) return value.dump();
  if (value.is_number_unsigned()) return std::to_string(value.get<uint64_t>());
  if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
  if (value.is_string()) return "the string " + in_quotes(value.get_ref<const std::string&>(), 40);
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_null()) return "null";
  return std::string("an ") + value.type_name();  // "an object", "an array"
}

// The keys of one shape, in the order they are checked and listed in messages.
constexpr std::string_view kRequiredKeys[] = {"q_heads", "kv_heads", "head_dim", "seq_len",
                                              "cp_size", "dtype",    "causal"};
constexpr std::string_view kOptionalKeys[] = {"name",     "batch",      "scheme", "softmax_scale", "documents",
                                              "cu_seqlens", "window", "softcap", "layout"};

std::string allowed_keys() {
  std::string out;
  for (auto key : kOptionalKeys) out += (out.empty() ? "" : ", ") + std::string(key);
  for (auto key : kRequiredKeys) out += ", " + std::string(key);
  return out;
}

bool is_known_key(std::string_view key) {
  return std::find(std::begin(kRequiredKeys), std::end(kRequiredKeys), key) != std::end(kRequiredKeys) ||
         std::find(std::begin(kOptionalKeys), std::end(kOptionalKeys), key) != std::end(kOptionalKeys);
}

// One shape being read: every message starts with the source and the shape.
class ShapeReader {
 public:
  ShapeReader(const std::string& source, size_t index) : source_(source) {
    label_ = "shapes[" + std::to_string(index) + "]";
  }

  void set_name(const std::string& name) { label_ += " (" + in_quotes(name) + ")"; }
  std::string where() const { return source_ + ": " + label_; }

  [[noreturn]] void fail(std::string_view field, const std::string& what) const {
    throw_bad_input(where() + ": " + std::string(field) + " " + what);
  }

  int64_t integer(const Json& value, std::string_view field, int64_t lo, int64_t hi) const {
    const std::string range = "an integer " + std::to_string(lo) + ".." + std::to_string(hi);
    if (value.is_number_float()) {
      // An integer literal beyond 64 bits (20 digits and more) arrives as a double too; saying
      // "without a fraction" about it would puzzle whoever wrote it.
      const double v = value.get<double>();
      if (std::isfinite(v) && std::floor(v) == v && std::fabs(v) >= 9.2e18) {
        fail(field, "must be " + range + ", got a number too large for any integer (about " + value.dump() + ")");
      }
      fail(field, "must be " + range + " written without a fraction or exponent, got " + describe(value));
    }
    if (!value.is_number_integer()) fail(field, "must be " + range + ", got " + describe(value));
    // Non-negative literals arrive as uint64 and may exceed int64; compare before converting.
    if (value.is_number_unsigned()) {
      const auto u = value.get<uint64_t>();
      if (u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) {
        fail(field, "must be " + range + ", got " + std::to_string(u));
      }
      return static_cast<int64_t>(u);
    }
    const auto v = value.get<int64_t>();
    if (v < lo || v > hi) fail(field, "must be " + range + ", got " + std::to_string(v));
    return v;
  }

  int64_t one_of(const Json& value, std::string_view field, std::span<const int> allowed) const {
    const std::string list = join(allowed);
    if (!value.is_number_integer()) {
      fail(field, "must be one of the integers " + list + ", got " + describe(value));
    }
    const bool negative = !value.is_number_unsigned() && value.get<int64_t>() < 0;
    if (!negative) {
      const auto u = value.get<uint64_t>();
      for (int v : allowed) {
        if (u == static_cast<uint64_t>(v)) return v;
      }
    }
    fail(field, describe(value) + " is not supported; allowed: " + list);
  }

  const std::string& text(const Json& value, std::string_view field, std::string_view allowed) const {
    if (!value.is_string()) fail(field, "must be a string (" + std::string(allowed) + "), got " + describe(value));
    return value.get_ref<const std::string&>();
  }

  bool boolean(const Json& value, std::string_view field) const {
    if (!value.is_boolean()) fail(field, "must be true or false, got " + describe(value));
    return value.get<bool>();
  }

 private:
  std::string source_;
  std::string label_;
};

bool is_printable_ascii(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte >= 0x20 && byte < 0x7f;
  });
}

constexpr std::string_view kLayouts = "bhsd, bshd, sbhd, thd";

// The mask fields of issue 11 (runtime/core/attention_shape.h): documents or cu_seqlens, window,
// softcap; and the tensor layout the user's framework hands over.
void read_mask_fields(const Json& entry, const ShapeReader& reader, Problem& p) {
  if (entry.contains("documents") && entry.contains("cu_seqlens"))
    reader.fail("documents", "and cu_seqlens describe the same packing; give one of them");
  if (auto it = entry.find("documents"); it != entry.end()) {
    if (!it->is_array() || it->empty() || static_cast<int64_t>(it->size()) > kMaxDocuments)
      reader.fail("documents", "must be an array of 1.." + std::to_string(kMaxDocuments) + " document lengths, got " +
                                   (it->is_array() ? "an array of " + std::to_string(it->size()) : describe(*it)));
    int64_t total = 0;
    for (const Json& length : *it) {
      p.documents.push_back(reader.integer(length, "documents", 0, p.seq_len));
      total += p.documents.back();
    }
    if (total != p.seq_len)
      reader.fail("documents", "sum to " + std::to_string(total) + "; they must sum to seq_len " +
                                   std::to_string(p.seq_len));
  }
  if (auto it = entry.find("cu_seqlens"); it != entry.end()) {
    if (!it->is_array() || it->size() < 2 || static_cast<int64_t>(it->size()) > kMaxDocuments + 1)
      reader.fail("cu_seqlens", "must be an array of 2.." + std::to_string(kMaxDocuments + 1) +
                                    " document boundaries from 0 to seq_len, got " +
                                    (it->is_array() ? "an array of " + std::to_string(it->size()) : describe(*it)));
    int64_t previous = 0;
    for (size_t i = 0; i < it->size(); ++i) {
      const int64_t bound = reader.integer((*it)[i], "cu_seqlens", 0, p.seq_len);
      if (i == 0 && bound != 0) reader.fail("cu_seqlens", "must start at 0, got " + std::to_string(bound));
      if (bound < previous)
        reader.fail("cu_seqlens", "must not decrease; " + std::to_string(bound) + " follows " + std::to_string(previous));
      if (i > 0) p.documents.push_back(bound - previous);
      previous = bound;
    }
    if (previous != p.seq_len)
      reader.fail("cu_seqlens", "must end at seq_len " + std::to_string(p.seq_len) + ", got " + std::to_string(previous));
  }
  if (auto it = entry.find("window"); it != entry.end()) {
    if (!it->is_object())
      reader.fail("window", "must be an object {\"left\": L, \"right\": R} (integers >= 0 or null), got " + describe(*it));
    for (const auto& side : it->items()) {
      const std::string field = "window." + side.key();
      if (side.key() != "left" && side.key() != "right")
        reader.fail(field, "is not a window field; allowed: left, right");
      const int64_t value = side.value().is_null() ? -1 : reader.integer(side.value(), field, 0, kMaxShapeSeqLen);
      (side.key() == "left" ? p.window_left : p.window_right) = value;
    }
  }
  if (auto it = entry.find("softcap"); it != entry.end()) {
    if (!it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>()))
      reader.fail("softcap", "must be a number > 0 (logits become softcap * tanh(logit / softcap)), got " + describe(*it));
    p.softcap = it->get<double>();
  }
  if (auto it = entry.find("layout"); it != entry.end()) {
    const std::string& layout = reader.text(*it, "layout", kLayouts);
    if (layout != "bhsd" && layout != "bshd" && layout != "sbhd" && layout != "thd")
      reader.fail("layout", in_quotes(layout) + " is not supported; allowed: " + std::string(kLayouts));
    if (layout == "thd" && p.batch != 1)
      reader.fail("layout", "\"thd\" packs every sequence into one: batch must be 1, got " + std::to_string(p.batch));
    p.layout = layout;
  }
}

Problem read_shape(const Json& entry, size_t index, const std::string& source) {
  ShapeReader reader(source, index);
  if (!entry.is_object()) {
    throw_bad_input(reader.where() + " must be an object of shape fields, got " + describe(entry));
  }

  Problem p;
  p.name = "shape[" + std::to_string(index) + "]";
  // The name comes first so that every later message can use it.
  if (auto it = entry.find("name"); it != entry.end()) {
    const std::string& name = reader.text(*it, "name", "1 to 100 printable ASCII characters");
    if (name.empty() || name.size() > kMaxShapeNameLength || !is_printable_ascii(name)) {
      reader.fail("name", "must be 1 to " + std::to_string(kMaxShapeNameLength) +
                              " printable ASCII characters, got " + in_quotes(name));
    }
    p.name = name;
    reader.set_name(name);
  }

  // Objects iterate in key order, so the first unknown key reported is deterministic.
  for (const auto& item : entry.items()) {
    if (!is_known_key(item.key())) {
      throw_bad_input(reader.where() + ": unknown field " + in_quotes(item.key(), 40) +
                      "; allowed: " + allowed_keys());
    }
  }
  for (auto key : kRequiredKeys) {
    if (!entry.contains(key)) {
      throw_bad_input(reader.where() + ": missing required field " + in_quotes(key));
    }
  }

  if (auto it = entry.find("batch"); it != entry.end()) p.batch = reader.integer(*it, "batch", 1, kMaxShapeBatch);
  p.q_heads = reader.integer(entry.at("q_heads"), "q_heads", 1, kMaxShapeHeads);
  p.kv_heads = reader.integer(entry.at("kv_heads"), "kv_heads", 1, kMaxShapeHeads);
  p.head_dim = reader.one_of(entry.at("head_dim"), "head_dim", kSupportedHeadDims);
  p.seq_len = reader.integer(entry.at("seq_len"), "seq_len", 1, kMaxShapeSeqLen);
  p.cp_size = reader.integer(entry.at("cp_size"), "cp_size", 1, kMaxShapeCpSize);

  const std::string& dtype = reader.text(entry.at("dtype"), "dtype", "bf16 or fp16");
  try {
    p.dtype = parse_dtype(dtype);
  } catch (const Error&) {
    reader.fail("dtype", in_quotes(dtype) + " is not supported; allowed: bf16, fp16");
  }
  p.causal = reader.boolean(entry.at("causal"), "causal");

  p.scheme = p.causal ? Scheme::kZigzag : Scheme::kContiguous;
  if (auto it = entry.find("scheme"); it != entry.end()) {
    constexpr std::string_view kSchemes = "contiguous, zigzag, zigzag-token, striped";
    const std::string& scheme = reader.text(*it, "scheme", kSchemes);
    try {
      p.scheme = parse_scheme(scheme);
    } catch (const Error&) {
      reader.fail("scheme", in_quotes(scheme) + " is not supported; allowed: " + std::string(kSchemes));
    }
  }

  if (auto it = entry.find("softmax_scale"); it != entry.end()) {
    // Any JSON number is fine here (0.088 or 1); JSON cannot spell NaN or infinity, and the
    // parser refuses literals beyond double range, so only the sign remains to check.
    // 0 stands for 1/sqrt(head_dim) in the API; a file leaves the field out for that.
    if (!it->is_number())
      reader.fail("softmax_scale", "must be a number > 0 (leave it out for 1/sqrt(head_dim)), got " + describe(*it));
    const double scale = it->get<double>();
    if (!(scale > 0) || !std::isfinite(scale)) {
      reader.fail("softmax_scale", "must be a number > 0 (leave it out for 1/sqrt(head_dim)), got " + it->dump());
    }
    p.softmax_scale = scale;
  }

  read_mask_fields(entry, reader, p);
  validate_problem(p, reader.where());
  return p;
}

// `empty` follows the source where the text holds nothing but white space.
Json parse_json(const std::string& text, const std::string& source, const std::string& empty) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; })) {
    throw_bad_input(source + ": " + empty);
  }
  refuse_nul_byte(text, source, "a shapes file");
  return parse_json_text(text, source, kMaxJsonDepth, "a shapes file needs 3");
}


}  // namespace

void validate_problem(const Problem& p, const std::string& where) {
  check_problem_limits(p, where);
  if (std::find(std::begin(kSupportedHeadDims), std::end(kSupportedHeadDims), p.head_dim) == std::end(kSupportedHeadDims)) {
    throw_bad_input(where + ": head_dim " + std::to_string(p.head_dim) +
                    " is not supported; allowed: " + join(kSupportedHeadDims));
  }

  if (p.kv_heads > p.q_heads) {
    throw_bad_input(where + ": kv_heads " + std::to_string(p.kv_heads) + " is more than q_heads " +
                    std::to_string(p.q_heads) + "; kv_heads must divide q_heads");
  }
  if (p.q_heads % p.kv_heads != 0) {
    throw_bad_input(where + ": kv_heads " + std::to_string(p.kv_heads) + " does not divide q_heads " +
                    std::to_string(p.q_heads) + "; each kv head must serve a whole group of query heads");
  }
  const int64_t group = p.q_heads / p.kv_heads;
  if (std::find(std::begin(kSupportedGqaGroups), std::end(kSupportedGqaGroups), group) == std::end(kSupportedGqaGroups)) {
    throw_bad_input(where + ": kv_heads " + std::to_string(p.kv_heads) + " gives a GQA group of " +
                    std::to_string(group) + " query heads per kv head (q_heads " + std::to_string(p.q_heads) +
                    "); supported groups: " + join(kSupportedGqaGroups));
  }
  // Any seq_len splits over any cp_size (runtime/ring/partition.h), so no divisibility rule.
  check_problem_mask(p, where);
  // The scale, the element count and the busiest rank's packed rows, as Problem::validate checks
  // them: a shape plan and verify accept is one the runtime accepts.
  check_problem_scale_and_size(p, where);
}

std::vector<Problem> parse_shapes_json(const std::string& text, const std::string& source_name) {
  const std::string source = printable(source_name, 200);
  const Json doc = parse_json(text, source, "the file is empty; expected {\"shapes\": [ ... ]}");
  if (!doc.is_object()) {
    throw_bad_input(source + ": the top level must be an object {\"shapes\": [ ... ]}, got " + describe(doc));
  }
  for (const auto& item : doc.items()) {
    if (item.key() != "shapes") {
      throw_bad_input(source + ": unknown top-level field " + in_quotes(item.key(), 40) + "; allowed: shapes");
    }
  }
  const auto shapes = doc.find("shapes");
  if (shapes == doc.end()) {
    throw_bad_input(source + ": missing top-level field \"shapes\" (an array of shape objects)");
  }
  if (!shapes->is_array()) {
    throw_bad_input(source + ": shapes must be an array of shape objects, got " + describe(*shapes));
  }
  if (shapes->empty()) throw_bad_input(source + ": shapes is empty; list at least one shape");

  std::vector<Problem> problems;
  std::map<std::string, size_t> index_of_name;
  for (size_t i = 0; i < shapes->size(); ++i) {
    Problem p = read_shape((*shapes)[i], i, source);
    const auto [it, inserted] = index_of_name.emplace(p.name, i);
    if (!inserted) {
      throw_bad_input(source + ": shapes[" + std::to_string(i) + "] (" + in_quotes(p.name) + "): name " +
                      in_quotes(p.name) + " is already used by shapes[" + std::to_string(it->second) +
                      "]; names must be unique");
    }
    problems.push_back(std::move(p));
  }
  return problems;
}

Problem parse_shape_json(const std::string& text, const std::string& source_name) {
  const std::string source = printable(source_name, 200);
  // KEY=VALUE pairs (cpgen bench's --shape syntax) are not JSON: say what this one takes.
  const size_t first = text.find_first_not_of(" \t\n\r");
  if (first != std::string::npos && text[first] != '{' && text.find('=') != std::string::npos)
    throw_bad_input(source + ": '" + printable(text, 60) + "' is not a JSON object; a shape here is one shapes-file "
                    "entry as JSON, e.g. '{\"q_heads\": 32, \"kv_heads\": 8, \"head_dim\": 128, \"seq_len\": 32768, "
                    "\"cp_size\": 8, \"dtype\": \"bf16\", \"causal\": true}' (cpgen bench takes KEY=VALUE pairs)");
  const Json doc = parse_json(text, source, "empty; a shape is a JSON object of shape fields");
  if (!doc.is_object()) throw_bad_input(source + ": a shape must be a JSON object of shape fields, got " + describe(doc));
  return read_shape(doc, 0, source);
}

std::vector<Problem> load_shapes_file(const std::string& path) {
  const std::string text = read_text_file(path, printable(path, 200), "a shapes file", kMaxShapesFileBytes);
  return parse_shapes_json(text, path);
}

}  // namespace cpgen
