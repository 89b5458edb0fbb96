// Loading reference vectors files: what is accepted, and one clear line for what is not.
#include "runtime/ring/vectors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "cpgen/error.h"

namespace cpgen {
namespace {

nlohmann::json tiny_vectors() {
  // batch 1, 2 query heads over 1 kv head, head_dim 1, seq_len 2.
  return {{"format", "cpgen-attention-vectors/1"}, {"name", "tiny"}, {"batch", 1},
          {"q_heads", 2}, {"kv_heads", 1}, {"head_dim", 1}, {"seq_len", 2}, {"causal", true},
          {"window", nullptr}, {"softmax_scale", 1.0},
          {"q", {1, 2, 3, 4}}, {"k", {1, 2}}, {"v", {1, 2}}, {"dout", {1, 1, 1, 1}},
          {"out", {1, 2, 3, 4}}, {"lse", {0, 0, 0, 0}}, {"dq", {0, 0, 0, 0}}, {"dk", {0, 0}},
          {"dv", {0, 0}}};
}

std::string error_of(const nlohmann::json& doc) {
  try {
    parse_attention_vectors(doc.dump(), "tiny.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    return e.what();
  }
  return "(accepted)";
}

TEST(VectorsFile, ParsesTheFields) {
  auto doc = tiny_vectors();
  doc["window"] = 4;
  const AttentionVectors v = parse_attention_vectors(doc.dump(), "tiny.json");
  EXPECT_EQ(v.name, "tiny");
  EXPECT_EQ(v.shape.q_heads, 2);
  EXPECT_EQ(v.shape.kv_heads, 1);
  EXPECT_EQ(v.shape.window_left, 3);  // format 1 masks i - j >= window: left = window - 1
  EXPECT_TRUE(v.shape.causal);
  EXPECT_EQ(v.seq_len, 2);
  EXPECT_EQ(v.q, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(v.dk.size(), 2u);
}

TEST(VectorsFile, RejectsWhatIsNotAVectorsFile) {
  auto doc = tiny_vectors();
  doc.erase("dq");
  EXPECT_EQ(error_of(doc),
            "tiny.json: not a vectors file: field 'dq' is missing");
  doc = tiny_vectors();
  doc["k"] = {1, 2, 3};
  EXPECT_EQ(error_of(doc), "tiny.json: field 'k' has 3 elements; the problem fields need 2");
  doc = tiny_vectors();
  doc["q_heads"] = 3;
  doc["kv_heads"] = 2;
  EXPECT_EQ(error_of(doc), "tiny.json: q_heads (3) is not a multiple of kv_heads (2)");
  doc = tiny_vectors();
  doc["kv_heads"] = 2;
  EXPECT_EQ(error_of(doc), "tiny.json: field 'k' has 2 elements; the problem fields need 4");
  doc = tiny_vectors();
  doc["window"] = 0;
  EXPECT_EQ(error_of(doc),
            "tiny.json: field 'window' must be null or a positive integer; got 0");
  doc = tiny_vectors();
  doc["v"][1] = "x";
  EXPECT_EQ(error_of(doc), "tiny.json: field 'v' holds a non-number: \"x\"");
  doc = tiny_vectors();
  doc["format"] = "cpgen-attention-vectors/3";
  EXPECT_EQ(error_of(doc),
            "tiny.json: format is \"cpgen-attention-vectors/3\"; expected \"cpgen-attention-vectors/1\" or "
            "\"cpgen-attention-vectors/2\"");
  doc = tiny_vectors();
  doc["batch"] = -1;
  EXPECT_EQ(error_of(doc), "tiny.json: field 'batch' must be a positive integer; got -1");
  EXPECT_THROW(parse_attention_vectors("[1, 2]", "x"), Error);
  // 2^32 in batch and both head counts wrapped the elements' int64 product to 0, which empty
  // tensors matched (verify then crashed).
  doc = tiny_vectors();
  // 2^32 in every size field made 2^128, which wrapped a 128-bit count to 0 too (a reviewer).
  doc["batch"] = doc["q_heads"] = doc["kv_heads"] = doc["seq_len"] = doc["head_dim"] = int64_t{1} << 32;
  for (const char* t : {"q", "k", "v", "dout", "out", "lse", "dq", "dk", "dv"})
    if (doc.contains(t)) doc[t] = nlohmann::json::array();
  EXPECT_EQ(error_of(doc).rfind("tiny.json: batch ", 0), 0u) << error_of(doc);
  // Every size within the problem model's limits, head_dim (which it leaves to the kernels) large:
  // a product past int64 is refused by the 2^48-element bound, before any tensor is multiplied out.
  doc["batch"] = 65536;
  doc["q_heads"] = doc["kv_heads"] = 1024;
  doc["seq_len"] = 1 << 30;
  doc["head_dim"] = int64_t{1} << 40;
  EXPECT_NE(error_of(doc).find("tiny.json: batch * q_heads * seq_len * head_dim exceeds 2^48 elements"), std::string::npos)
      << error_of(doc);
  doc["batch"] = doc["q_heads"] = doc["kv_heads"] = 1;
  doc["seq_len"] = 1 << 20;
  doc["head_dim"] = 1024;
  EXPECT_NE(error_of(doc).find("tiny.json: batch * heads * seq_len * head_dim is more elements than a vectors file holds"),
            std::string::npos)
      << error_of(doc);
  // The problem model's limits, checked before the tensors: a batch past 65536 passed the reader.
  doc = tiny_vectors();
  doc["batch"] = 65537;
  EXPECT_EQ(error_of(doc).rfind("tiny.json: batch ", 0), 0u) << error_of(doc);
  EXPECT_NE(error_of(doc).find("65536"), std::string::npos) << error_of(doc);
  // A NUL after a valid file: the parser took it for the end and never read what followed.
  try {
    parse_attention_vectors(tiny_vectors().dump() + std::string("\0{}", 3), "nul.json");
    ADD_FAILURE() << "a file with a NUL byte was read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("nul.json: a NUL byte at line 1, column ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("; a vectors file is JSON text"), std::string::npos) << e.what();
  }
}

// A field given twice (nlohmann kept the last silently: a second "q" replaced the first) and
// nesting past the readers' limit are refused, as in every JSON file cpgen reads.
TEST(VectorsFile, AFieldGivenTwiceOrDeepNestingIsRefused) {
  std::string text = tiny_vectors().dump();
  text.insert(text.size() - 1, R"(,"seq_len": 1)");
  try {
    parse_attention_vectors(text, "twice.json");
    ADD_FAILURE() << "a file with seq_len twice was read";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "twice.json: the top level: field \"seq_len\" appears twice; each field may be given once");
  }
  try {
    parse_attention_vectors(std::string(100000, '['), "deep.json");
    ADD_FAILURE() << "a deeply nested file was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deep.json: JSON nested deeper than 32 levels"), std::string::npos) << e.what();
  }
}

TEST(VectorsFile, RelativeError) {
  EXPECT_DOUBLE_EQ(relative_error(std::vector<double>{3, 4}, std::vector<double>{3, 4}), 0);
  EXPECT_DOUBLE_EQ(relative_error(std::vector<double>{3, 5}, std::vector<double>{3, 4}), 0.2);
  EXPECT_DOUBLE_EQ(relative_error(std::vector<float>{1, 1}, std::vector<double>{0, 0}),
                   std::sqrt(2.0));
  EXPECT_TRUE(std::isnan(relative_error(
      std::vector<float>{std::numeric_limits<float>::quiet_NaN()}, std::vector<double>{1})));
  EXPECT_THROW(relative_error(std::vector<double>{1}, std::vector<double>{1, 2}), Error);
}

nlohmann::json tiny_vectors_v2() {
  nlohmann::json doc = tiny_vectors();
  doc["format"] = "cpgen-attention-vectors/2";
  doc["documents"] = {1, 0, 1};
  doc["window"] = {{"left", 3}, {"right", nullptr}};
  doc["softcap"] = 15.0;
  return doc;
}

TEST(VectorsFile, ParsesFormat2Masks) {
  const AttentionVectors v = parse_attention_vectors(tiny_vectors_v2().dump(), "tiny.json");
  EXPECT_EQ(v.format, 2);
  EXPECT_EQ(v.shape.cu_seqlens, (std::vector<int64_t>{0, 1, 1, 2}));
  EXPECT_EQ(v.shape.window_left, 3);
  EXPECT_EQ(v.shape.window_right, -1);
  EXPECT_EQ(v.shape.softcap, 15.0);
  const Problem p = problem_from_vectors(v, 2, Scheme::kZigzag, Dtype::kBf16);
  EXPECT_EQ(p.documents, (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(p.window_left, 3);
  EXPECT_EQ(p.softcap, 15.0);
}

TEST(VectorsFile, RefusesBadFormat2FieldsByName) {
  nlohmann::json doc = tiny_vectors_v2();
  doc["documents"] = {1, 2};
  EXPECT_EQ(error_of(doc), "tiny.json: field 'documents' sums to 3; it must sum to seq_len 2");
  doc = tiny_vectors_v2();
  doc["documents"] = {3, -1};
  EXPECT_EQ(error_of(doc), "tiny.json: field 'documents' holds 3; a length must be an integer 0..2");
  doc = tiny_vectors_v2();
  doc.erase("documents");
  EXPECT_EQ(error_of(doc), "tiny.json: not a vectors file: field 'documents' is missing");
  doc = tiny_vectors_v2();
  doc["window"] = {{"left", -1}, {"right", 0}};
  EXPECT_EQ(error_of(doc), "tiny.json: field 'window.left' must be null or an integer >= 0; got -1");
  doc = tiny_vectors_v2();
  doc["window"] = 4;
  EXPECT_NE(error_of(doc).find("field 'window' must be null or {"), std::string::npos);
  doc = tiny_vectors_v2();
  doc["softcap"] = 0;
  EXPECT_EQ(error_of(doc), "tiny.json: field 'softcap' must be null or a number > 0; got 0");
  // The problem model's bounds, as every other way a problem arrives is checked: a window side of
  // 2^63 - 1 overflowed in the visibility (verify said FAIL), a softcap of 1e308 became inf.
  doc = tiny_vectors_v2();
  doc["window"] = {{"left", nullptr}, {"right", INT64_MAX}};
  EXPECT_NE(error_of(doc).find("tiny.json: window_right is 9223372036854775807; it must be -1 (unbounded) or an integer 0.."),
            std::string::npos)
      << error_of(doc);
  doc = tiny_vectors_v2();
  doc["softcap"] = 1e308;
  EXPECT_NE(error_of(doc).find("softcap 1e+308 is outside what the kernels' float32 takes"), std::string::npos)
      << error_of(doc);
}

}  // namespace
}  // namespace cpgen
