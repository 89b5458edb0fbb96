#include "runtime/ring/shapes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

#include "cpgen/error.h"

namespace cpgen {
namespace {

// A valid shape as raw JSON text per field, so that tests can put in literals such as 2.0 or
// 1e3 exactly as a user would type them.
using Fields = std::vector<std::pair<std::string, std::string>>;

Fields base_fields() {
  return {{"name", "\"llama\""}, {"batch", "1"},          {"q_heads", "32"},
          {"kv_heads", "8"},     {"head_dim", "128"},     {"seq_len", "131072"},
          {"cp_size", "8"},      {"dtype", "\"bf16\""},   {"causal", "true"},
          {"scheme", "\"zigzag\""}};
}

// Replaces (or appends) fields; a value of "<drop>" removes the field.
std::string shapes_text(const std::map<std::string, std::string>& changes) {
  Fields fields = base_fields();
  for (const auto& [key, value] : changes) {
    bool found = false;
    for (auto& field : fields) {
      if (field.first == key) {
        field.second = value;
        found = true;
      }
    }
    if (!found) fields.emplace_back(key, value);
  }
  std::string text = "{\"shapes\": [{";
  bool first = true;
  for (const auto& [key, value] : fields) {
    if (value == "<drop>") continue;
    text += (first ? "" : ", ") + ("\"" + key + "\": ") + value;
    first = false;
  }
  return text + "}]}";
}

// Parses text that must be rejected; returns the message after checking that it is bad input,
// one line, and names the source.
std::string rejection(const std::string& text) {
  try {
    parse_shapes_json(text, "test.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    EXPECT_EQ(message.rfind("test.json: ", 0), 0u) << message;
    for (char c : message) {
      const auto byte = static_cast<unsigned char>(c);
      EXPECT_TRUE(byte >= 0x20 && byte < 0x7f) << "unprintable byte " << int(byte) << " in: " << message;
    }
    return message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-cpgen exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "accepted: " << text.substr(0, 300);
  return {};
}

void expect_rejected(const std::string& text, std::initializer_list<std::string> parts) {
  const std::string message = rejection(text);
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "message lacks '" << part << "': " << message;
  }
}

void expect_field_rejected(const std::map<std::string, std::string>& changes,
                           std::initializer_list<std::string> parts) {
  SCOPED_TRACE(shapes_text(changes));
  std::vector<std::string> all(parts);
  all.push_back("shapes[0]");
  const std::string message = rejection(shapes_text(changes));
  for (const std::string& part : all) {
    EXPECT_NE(message.find(part), std::string::npos) << "message lacks '" << part << "': " << message;
  }
}

TEST(Shapes, ParsesEveryField) {
  const auto problems = parse_shapes_json(
      R"({"shapes": [{"name": "llama3-8b-128k-cp8", "batch": 2, "q_heads": 32, "kv_heads": 8,
          "head_dim": 128, "seq_len": 131072, "cp_size": 8, "dtype": "fp16", "causal": true,
          "scheme": "striped", "softmax_scale": 0.125}]})",
      "inline");
  ASSERT_EQ(problems.size(), 1u);
  const Problem& p = problems[0];
  EXPECT_EQ(p.name, "llama3-8b-128k-cp8");
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.q_heads, 32);
  EXPECT_EQ(p.kv_heads, 8);
  EXPECT_EQ(p.gqa_group(), 4);
  EXPECT_EQ(p.head_dim, 128);
  EXPECT_EQ(p.seq_len, 131072);
  EXPECT_EQ(p.cp_size, 8);
  EXPECT_EQ(p.dtype, Dtype::kFp16);
  EXPECT_TRUE(p.causal);
  EXPECT_EQ(p.scheme, Scheme::kStriped);
  EXPECT_DOUBLE_EQ(p.scale(), 0.125);
}

TEST(Shapes, OptionalFieldsTakeTheirDefaults) {
  const auto problems = parse_shapes_json(
      R"({"shapes": [
           {"q_heads": 16, "kv_heads": 16, "head_dim": 64, "seq_len": 4096, "cp_size": 4, "dtype": "bf16", "causal": true},
           {"q_heads": 16, "kv_heads": 16, "head_dim": 64, "seq_len": 4100, "cp_size": 4, "dtype": "bf16", "causal": false}]})",
      "inline");
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].name, "shape[0]");
  EXPECT_EQ(problems[1].name, "shape[1]");
  EXPECT_EQ(problems[0].batch, 1);
  EXPECT_EQ(problems[0].scheme, Scheme::kZigzag);      // causal: balanced by default
  EXPECT_EQ(problems[1].scheme, Scheme::kContiguous);  // non-causal: every split is balanced
  EXPECT_EQ(problems[0].softmax_scale, 0);
  EXPECT_DOUBLE_EQ(problems[0].scale(), 1.0 / 8.0);
}

TEST(Shapes, AcceptsTheEdgesOfEveryRange) {
  // Largest sequence length with one rank; an integral softmax_scale is a number too.
  // (Group 1: the packed query rows, seq_len * group per rank, stay within their own 2^30 limit.)
  auto p = parse_shapes_json(shapes_text({{"seq_len", "1073741824"}, {"cp_size", "1"}, {"q_heads", "8"},
                                          {"kv_heads", "8"}, {"scheme", "\"contiguous\""}, {"softmax_scale", "1"}}),
                             "t")[0];
  EXPECT_EQ(p.seq_len, 1073741824);
  EXPECT_NO_THROW(p.validate());  // the runtime accepts the largest length a file admits
  EXPECT_DOUBLE_EQ(p.scale(), 1.0);
  p = parse_shapes_json(shapes_text({{"q_heads", "16"}, {"kv_heads", "1"}, {"head_dim", "256"}}), "t")[0];
  EXPECT_EQ(p.gqa_group(), 16);
  p = parse_shapes_json(shapes_text({{"cp_size", "1024"}, {"seq_len", "2097152"}}), "t")[0];
  EXPECT_EQ(p.cp_size, 1024);
  p = parse_shapes_json(shapes_text({{"q_heads", "1024"}, {"kv_heads", "1024"}, {"batch", "65536"},
                                     {"seq_len", "4096"}, {"head_dim", "64"}}),
                        "t")[0];
  EXPECT_EQ(p.batch, 65536);
  for (int hd : {64, 96, 128, 256}) {
    EXPECT_EQ(parse_shapes_json(shapes_text({{"head_dim", std::to_string(hd)}}), "t")[0].head_dim, hd);
  }
}

TEST(Shapes, ExamplesAreValid) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(CPGEN_SOURCE_DIR) + "/examples/shapes")) {
    if (entry.path().extension() != ".json") continue;
    SCOPED_TRACE(entry.path().string());
    const auto problems = load_shapes_file(entry.path().string());
    EXPECT_FALSE(problems.empty());
    ++files;
  }
  EXPECT_GE(files, 3);
}

TEST(Shapes, RejectsUnknownFields) {
  expect_field_rejected({{"sq_len", "4"}}, {"(\"llama\")", "unknown field \"sq_len\"", "allowed: name, batch"});
  expect_field_rejected({{"Name", "\"x\""}}, {"unknown field \"Name\""});
  expect_rejected(R"({"shapes": [], "version": 1})", {"unknown top-level field \"version\"", "allowed: shapes"});
}

TEST(Shapes, RejectsMissingRequiredFields) {
  for (const char* key : {"q_heads", "kv_heads", "head_dim", "seq_len", "cp_size", "dtype", "causal"}) {
    expect_field_rejected({{key, "<drop>"}}, {std::string("missing required field \"") + key + "\"", "\"llama\""});
  }
  expect_rejected(R"({})", {"missing top-level field \"shapes\""});
}

TEST(Shapes, RejectsWrongTypesAndNull) {
  expect_field_rejected({{"q_heads", "\"32\""}}, {"q_heads must be an integer 1..1024", "got the string \"32\""});
  expect_field_rejected({{"kv_heads", "null"}}, {"kv_heads must be an integer", "got null"});
  expect_field_rejected({{"batch", "true"}}, {"batch must be an integer 1..65536", "got true"});
  expect_field_rejected({{"seq_len", "[131072]"}}, {"seq_len", "got an array"});
  expect_field_rejected({{"cp_size", "{}"}}, {"cp_size", "got an object"});
  expect_field_rejected({{"head_dim", "\"128\""}}, {"head_dim must be one of the integers 64, 96, 128, 256"});
  expect_field_rejected({{"dtype", "16"}}, {"dtype must be a string", "got 16"});
  expect_field_rejected({{"dtype", "null"}}, {"dtype must be a string", "got null"});
  expect_field_rejected({{"causal", "\"true\""}}, {"causal must be true or false", "got the string \"true\""});
  expect_field_rejected({{"causal", "1"}}, {"causal must be true or false", "got 1"});
  expect_field_rejected({{"scheme", "null"}}, {"scheme must be a string", "got null"});
  expect_field_rejected({{"softmax_scale", "\"0.1\""}}, {"softmax_scale must be a number > 0"});
  expect_field_rejected({{"name", "7"}}, {"name must be a string", "got 7"});
  expect_rejected(R"({"shapes": [7]})", {"shapes[0] must be an object", "got 7"});
  expect_rejected(R"({"shapes": {"a": 1}})", {"shapes must be an array", "got an object"});
  expect_rejected(R"({"shapes": null})", {"shapes must be an array", "got null"});
}

TEST(Shapes, RejectsNonIntegersWhereIntegersBelong) {
  // 2.0 is rejected too: an integer field takes integer literals only, never a rounded float.
  expect_field_rejected({{"batch", "1.5"}}, {"batch must be an integer 1..65536 written without a fraction or exponent", "1.5"});
  expect_field_rejected({{"batch", "2.0"}}, {"batch", "without a fraction", "2.0"});
  expect_field_rejected({{"seq_len", "1e3"}}, {"seq_len", "without a fraction or exponent"});
  expect_field_rejected({{"q_heads", "-0.0"}}, {"q_heads", "without a fraction"});
  expect_field_rejected({{"head_dim", "128.0"}}, {"head_dim must be one of the integers", "128.0"});
}

TEST(Shapes, RejectsOutOfRangeNumbers) {
  expect_field_rejected({{"batch", "0"}}, {"batch must be an integer 1..65536, got 0"});
  expect_field_rejected({{"batch", "65537"}}, {"batch must be an integer 1..65536, got 65537"});
  expect_field_rejected({{"q_heads", "-1"}}, {"q_heads must be an integer 1..1024, got -1"});
  expect_field_rejected({{"q_heads", "2048"}, {"kv_heads", "128"}}, {"q_heads must be an integer 1..1024, got 2048"});
  expect_field_rejected({{"kv_heads", "0"}}, {"kv_heads must be an integer 1..1024, got 0"});
  expect_field_rejected({{"cp_size", "0"}}, {"cp_size must be an integer 1..1024, got 0"});
  expect_field_rejected({{"cp_size", "1025"}}, {"cp_size must be an integer 1..1024, got 1025"});
  expect_field_rejected({{"seq_len", "0"}}, {"seq_len must be an integer 1..1073741824, got 0"});
  // One limit with the runtime (kMaxSeqLen, 2^30): a file never admits what Problem::validate refuses.
  expect_field_rejected({{"seq_len", "1073741825"}}, {"seq_len must be an integer 1..1073741824, got 1073741825"});
  expect_field_rejected({{"seq_len", "2147483647"}}, {"seq_len must be an integer 1..1073741824, got 2147483647"});
  // Beyond int64 and beyond uint64 (the latter arrives as a float): still a clean message.
  expect_field_rejected({{"seq_len", "9223372036854775808"}}, {"seq_len", "got 9223372036854775808"});
  expect_field_rejected({{"seq_len", "18446744073709551615"}}, {"seq_len", "got 18446744073709551615"});
  expect_field_rejected({{"seq_len", "184467440737095516160000"}}, {"seq_len must be an integer 1..1073741824, got a number too large"});
  expect_field_rejected({{"batch", "-9223372036854775808"}}, {"batch", "got -9223372036854775808"});
  expect_field_rejected({{"batch", "-99999999999999999999"}}, {"batch must be an integer 1..65536, got a number too large"});
  expect_field_rejected({{"softmax_scale", "0"}}, {"softmax_scale must be a number > 0 (leave it out for 1/sqrt(head_dim)), got 0"});
  expect_field_rejected({{"softmax_scale", "-0.5"}}, {"softmax_scale must be a number > 0 (leave it out for 1/sqrt(head_dim)), got -0.5"});
  // A literal beyond double range is refused by the JSON parser itself.
  expect_rejected(shapes_text({{"softmax_scale", "1e400"}}), {"not valid JSON", "number overflow"});
}

TEST(Shapes, RejectsUnsupportedValues) {
  expect_field_rejected({{"head_dim", "80"}}, {"head_dim 80 is not supported; allowed: 64, 96, 128, 256"});
  expect_field_rejected({{"head_dim", "-128"}}, {"head_dim -128 is not supported; allowed: 64, 96, 128, 256"});
  expect_field_rejected({{"head_dim", "18446744073709551615"}}, {"head_dim 18446744073709551615 is not supported"});
  expect_field_rejected({{"dtype", "\"fp8\""}}, {"dtype \"fp8\" is not supported; allowed: bf16, fp16"});
  expect_field_rejected({{"dtype", "\"BF16\""}}, {"dtype \"BF16\" is not supported"});
  expect_field_rejected({{"scheme", "\"ring\""}},
                        {"scheme \"ring\" is not supported; allowed: contiguous, zigzag, zigzag-token, striped"});
}

TEST(Shapes, RejectsHeadCountsTheKernelsCannotServe) {
  expect_field_rejected({{"kv_heads", "6"}}, {"kv_heads 6 does not divide q_heads 32"});
  expect_field_rejected({{"kv_heads", "64"}}, {"kv_heads 64 is more than q_heads 32"});
  // MQA with 32 query heads is a group of 32: larger than any group the kernels pack.
  expect_field_rejected({{"kv_heads", "1"}}, {"kv_heads 1 gives a GQA group of 32", "supported groups: 1, 2, 4, 8, 16"});
  expect_field_rejected({{"q_heads", "24"}, {"kv_heads", "8"}}, {"GQA group of 3"});
}

// Issue 11: no divisibility rule; any length splits over any ring (ranks then hold different
// token counts), and the kernel ring runs them (issue 11).
TEST(Shapes, AcceptsLengthsNoRingDivides) {
  EXPECT_EQ(parse_shapes_json(shapes_text({{"seq_len", "131080"}}), "t")[0].seq_len, 131080);
  EXPECT_EQ(parse_shapes_json(shapes_text({{"seq_len", "4"}, {"scheme", "\"striped\""}}), "t")[0].seq_len, 4);
}

TEST(Shapes, ReadsDocumentsWindowSoftcapAndLayout) {
  const Problem p = parse_shapes_json(
      shapes_text({{"seq_len", "1000"}, {"documents", "[600, 0, 1, 399]"}, {"window", "{\"left\": 128, \"right\": null}"},
                   {"softcap", "30.0"}, {"layout", "\"bshd\""}}),
      "t")[0];
  EXPECT_EQ(p.documents, (std::vector<int64_t>{600, 0, 1, 399}));
  EXPECT_EQ(p.window_left, 128);
  EXPECT_EQ(p.window_right, -1);
  EXPECT_EQ(p.softcap, 30.0);
  EXPECT_EQ(p.layout, "bshd");
  const Problem q =
      parse_shapes_json(shapes_text({{"seq_len", "10"}, {"cu_seqlens", "[0, 3, 3, 10]"}, {"layout", "\"thd\""}}), "t")[0];
  EXPECT_EQ(q.documents, (std::vector<int64_t>{3, 0, 7}));
}

TEST(Shapes, RejectsBadMaskFieldsByName) {
  expect_field_rejected({{"seq_len", "10"}, {"documents", "[3, 4]"}}, {"documents sum to 7; they must sum to seq_len 10"});
  expect_field_rejected({{"seq_len", "10"}, {"documents", "[3, -1, 8]"}}, {"documents must be an integer 0..10, got -1"});
  expect_field_rejected({{"seq_len", "10"}, {"documents", "[]"}}, {"documents must be an array of 1.."});
  expect_field_rejected({{"seq_len", "10"}, {"documents", "[10]"}, {"cu_seqlens", "[0, 10]"}},
                        {"documents and cu_seqlens describe the same packing"});
  expect_field_rejected({{"seq_len", "10"}, {"cu_seqlens", "[1, 10]"}}, {"cu_seqlens must start at 0, got 1"});
  expect_field_rejected({{"seq_len", "10"}, {"cu_seqlens", "[0, 6, 4, 10]"}}, {"cu_seqlens must not decrease; 4 follows 6"});
  expect_field_rejected({{"seq_len", "10"}, {"cu_seqlens", "[0, 6]"}}, {"cu_seqlens must end at seq_len 10, got 6"});
  expect_field_rejected({{"window", "{\"left\": -1}"}}, {"window.left must be an integer 0..1073741824, got -1"});
  expect_field_rejected({{"window", "{\"up\": 3}"}}, {"window.up is not a window field; allowed: left, right"});
  expect_field_rejected({{"window", "64"}}, {"window must be an object"});
  expect_field_rejected({{"softcap", "0"}}, {"softcap must be a number > 0"});
  expect_field_rejected({{"layout", "\"bsdh\""}}, {"layout \"bsdh\" is not supported; allowed: bhsd, bshd, sbhd, thd"});
  expect_field_rejected({{"batch", "2"}, {"layout", "\"thd\""}}, {"batch must be 1, got 2"});
}

TEST(Shapes, RejectsProblemsBeyondTwoToThe48Elements) {
  expect_field_rejected({{"batch", "65536"}, {"q_heads", "1024"}, {"kv_heads", "1024"}, {"seq_len", "1048576"},
                         {"head_dim", "256"}},
                        {"exceeds 2^48 elements"});
}

// A shapes file refuses what Problem::validate refuses (plan and verify read files, RingAttention
// and explain validate the problem): a scale past float32's range, or whose quotient by the
// softcap is, and the busiest rank's packed rows past 2^30. Before, the file took a scale of 1e39,
// verify ran it and failed every check with an infinite lse.
TEST(Shapes, RefusesWhatTheRuntimeRefuses) {
  expect_field_rejected({{"softmax_scale", "1e39"}}, {"softmax_scale 1e+39 is outside what the kernels' float32 takes"});
  expect_field_rejected({{"softmax_scale", "1e29"}, {"softcap", "1e-29"}},
                        {"softmax_scale / softcap = 1e+58 is outside what the kernels' float32 takes"});
  expect_field_rejected({{"q_heads", "16"}, {"kv_heads", "1"}, {"head_dim", "64"}, {"seq_len", "134217728"},
                         {"cp_size", "2"}, {"scheme", "\"contiguous\""}, {"documents", "[67108865, 67108863]"}},
                        {"rank 0 holds 67108865 tokens", "above the supported maximum 2^30"});
}

TEST(Shapes, RejectsBadNames) {
  expect_field_rejected({{"name", "\"\""}}, {"name must be 1 to 100 printable ASCII characters"});
  expect_field_rejected({{"name", "\"" + std::string(101, 'a') + "\""}}, {"name must be 1 to 100"});
  // An escaped newline and a non-ASCII character: both would break one-line messages and logs.
  expect_field_rejected({{"name", R"("a\nb")"}}, {"name must be", "a\\x0ab"});
  expect_field_rejected({{"name", "\"caf\xc3\xa9\""}}, {"name must be", "caf\\xc3\\xa9"});
  expect_rejected(
      R"({"shapes": [
           {"name": "a", "q_heads": 8, "kv_heads": 8, "head_dim": 64, "seq_len": 64, "cp_size": 2, "dtype": "bf16", "causal": true},
           {"name": "a", "q_heads": 8, "kv_heads": 8, "head_dim": 64, "seq_len": 64, "cp_size": 2, "dtype": "bf16", "causal": true}]})",
      {"shapes[1] (\"a\"): name \"a\" is already used by shapes[0]"});
}

TEST(Shapes, RejectsABadTopLevel) {
  expect_rejected(R"({"shapes": []})", {"shapes is empty"});
  expect_rejected(R"([{"q_heads": 8}])", {"the top level must be an object", "got an array"});
  expect_rejected(R"("shapes")", {"the top level must be an object", "got the string"});
  expect_rejected("42", {"the top level must be an object", "got 42"});
  expect_rejected("null", {"the top level must be an object", "got null"});
  expect_rejected("", {"the file is empty"});
  expect_rejected(" \n\t\r\n", {"the file is empty"});
}

TEST(Shapes, ReportsWhereTheJsonIsBroken) {
  expect_rejected("{\"shapes\": [\n  {\"q_heads\": 32,\n   \"kv_heads\": 8,,\n", {"not valid JSON at line 3, column 18", "unexpected ','"});
  expect_rejected(R"({"shapes": [{"q_heads": 8,}]})", {"not valid JSON at line 1, column 27"});
  expect_rejected("{\"shapes\": [", {"not valid JSON at line 1, column 13", "unexpected end of input"});
  expect_rejected(shapes_text({}) + " trailing", {"not valid JSON"});
  expect_rejected(shapes_text({}) + shapes_text({}), {"not valid JSON"});
  // A NUL byte and a raw newline inside a string.
  expect_rejected(std::string("{\"shapes\": [\"a\0b\"]}", 19), {"a NUL byte at line 1, column 15"});
  // After the document: the parser took the NUL for the end and never read what followed.
  expect_rejected(shapes_text({}) + std::string("\0 trailing", 10), {"a NUL byte at line"});
  // The raw newline itself is the offending byte: the last column of line 1.
  expect_rejected("{\"shapes\": [{\"name\": \"a\nb\"}]}", {"not valid JSON at line 1, column 24", "U+000A"});
}

TEST(Shapes, RejectsBytesThatAreNotUtf8WithoutEchoingThem) {
  // The message must stay printable ASCII (checked in rejection()) and point at the byte.
  expect_rejected("{\"shapes\": [{\"name\": \"\xff\xfe\"}]}", {"not valid JSON at line 1", "UTF-8", "\\xff"});
  expect_rejected("\xef\xbb\xbf{\"shapes\": 5}", {"shapes must be an array"});  // a BOM is fine
  expect_rejected("\xc0\xaf", {"not valid JSON at line 1, column 1"});
}

TEST(Shapes, RejectsDeepNestingWithoutRecursing) {
  expect_rejected(std::string(200000, '['), {"nested deeper than 32 levels"});
  expect_rejected(std::string(200000, '[') + std::string(200000, ']'), {"nested deeper than 32 levels"});
  std::string deep_value = R"({"shapes": [{"name": )" + std::string(100, '[') + std::string(100, ']') + "}]}";
  expect_rejected(deep_value, {"nested deeper", "shapes[0].name"});
}

TEST(Shapes, RejectsDuplicateKeys) {
  expect_rejected(R"({"shapes": [{"q_heads": 32, "kv_heads": 8, "q_heads": 16}]})",
                  {"shapes[0]: field \"q_heads\" appears twice"});
  expect_rejected(R"({"shapes": [], "shapes": []})", {"field \"shapes\" appears twice"});
}

TEST(Shapes, NamesTheShapeByIndexAndName) {
  const std::string ok = R"({"name": "ok", "q_heads": 8, "kv_heads": 8, "head_dim": 64, "seq_len": 64, "cp_size": 2, "dtype": "bf16", "causal": true})";
  expect_rejected(R"({"shapes": [)" + ok + R"(, {"name": "second", "q_heads": 8, "kv_heads": 8, "head_dim": 80, "seq_len": 64, "cp_size": 2, "dtype": "bf16", "causal": true}]})",
                  {"shapes[1] (\"second\"): head_dim 80"});
  expect_rejected(R"({"shapes": [)" + ok + R"(, {"q_heads": 8, "kv_heads": 8, "head_dim": 64, "seq_len": 64, "cp_size": 2, "dtype": "bf16", "causal": 0}]})",
                  {"shapes[1]: causal must be true or false"});
}

// Whatever bytes arrive, the parser either returns valid problems or throws one-line bad input:
// no other exception, no crash. Deterministic mutations of a valid file (flips, inserts, cuts).
TEST(Shapes, SurvivesRandomMutations) {
  const std::string valid = shapes_text({{"softmax_scale", "0.125"}});
  std::mt19937 rng(20261121);
  int accepted = 0, rejected = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string text = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      switch (rng() % 4) {
        case 0: text[at] = static_cast<char>(rng() % 256); break;
        case 1: text.insert(at, 1, "{}[]\",:0-.e9\x00"[rng() % 14]); break;
        case 2: text.erase(at, 1 + rng() % 8); break;
        case 3: text.resize(at); break;
      }
    }
    try {
      for (const Problem& p : parse_shapes_json(text, "fuzz")) EXPECT_NO_THROW(validate_problem(p, "fuzz"));
      ++accepted;
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
      const std::string message = e.what();
      ASSERT_EQ(message.find('\n'), std::string::npos) << message;
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 2000);
  EXPECT_GT(accepted, 0);
}

class ShapesFile : public ::testing::Test {
 protected:
  std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                               ("cpgen_shapes_test_" + std::to_string(::getpid()));
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string load_error(const std::string& path) {
    try {
      load_shapes_file(path);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      return e.what();
    }
    ADD_FAILURE() << "loaded " << path;
    return {};
  }
};

TEST_F(ShapesFile, LoadsAFile) {
  const auto path = (dir_ / "ok.json").string();
  std::ofstream(path) << shapes_text({});
  const auto problems = load_shapes_file(path);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].name, "llama");
}

TEST_F(ShapesFile, ReportsMissingAndUnreadableFiles) {
  const auto missing = (dir_ / "missing.json").string();
  std::string message = load_error(missing);
  EXPECT_NE(message.find(missing + ": cannot open a shapes file: No such file or directory"), std::string::npos) << message;
  message = load_error(dir_.string());
  EXPECT_NE(message.find("is a directory, not a shapes file"), std::string::npos) << message;
}

TEST_F(ShapesFile, NamesThePathInParseErrors) {
  const auto path = (dir_ / "broken.json").string();
  std::ofstream(path) << "{\"shapes\": [";
  const std::string message = load_error(path);
  EXPECT_EQ(message.rfind(path + ": not valid JSON at line 1, column 13", 0), 0u) << message;
}

TEST_F(ShapesFile, RefusesFilesLargerThanTheLimit) {
  const auto path = (dir_ / "huge.json").string();
  {
    std::ofstream out(path);
    const std::string spaces(1 << 20, ' ');
    for (int i = 0; i < 17; ++i) out << spaces;
  }
  const std::string message = load_error(path);
  EXPECT_NE(message.find("is longer than 16 MiB"), std::string::npos) << message;
}

TEST(ShapesValidate, ChecksProblemsBuiltInCode) {
  Problem p;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.seq_len = 4096;
  p.cp_size = 4;
  EXPECT_NO_THROW(validate_problem(p, "api"));
  p.head_dim = 80;
  EXPECT_THROW(validate_problem(p, "api"), Error);
  p.head_dim = 128;
  p.seq_len = 4100;  // not a multiple of 2 * 4: fine for the problem, refused by the kernels
  EXPECT_NO_THROW(validate_problem(p, "api"));
  p.softcap = -1;
  try {
    validate_problem(p, "api");
    ADD_FAILURE() << "accepted softcap -1";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_EQ(std::string(e.what()).rfind("api: softcap", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace cpgen
