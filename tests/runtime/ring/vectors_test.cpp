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
  EXPECT_EQ(v.shape.window, 4);
  EXPECT_TRUE(v.shape.causal);
  EXPECT_EQ(v.seq_len, 2);
  EXPECT_EQ(v.q, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(v.dk.size(), 2u);
}

TEST(VectorsFile, RejectsWhatIsNotAVectorsFile) {
  auto doc = tiny_vectors();
  doc.erase("dq");
  EXPECT_EQ(error_of(doc),
            "tiny.json: not a cpgen-attention-vectors/1 file: field 'dq' is missing");
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
  doc["format"] = "cpgen-attention-vectors/2";
  EXPECT_EQ(error_of(doc),
            "tiny.json: format is \"cpgen-attention-vectors/2\"; expected \"cpgen-attention-vectors/1\"");
  doc = tiny_vectors();
  doc["batch"] = -1;
  EXPECT_EQ(error_of(doc), "tiny.json: field 'batch' must be a positive integer; got -1");
  EXPECT_THROW(parse_attention_vectors("[1, 2]", "x"), Error);
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

}  // namespace
}  // namespace cpgen
