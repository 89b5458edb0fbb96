// parse_json_text and read_json_file (runtime/core/json_text.h): the one parser of the JSON texts
// a user hands cpgen, so shapes, vectors, pretuned caches and imports refuse the same things in
// the same words.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>

#include "cpgen/error.h"
#include "runtime/core/json_text.h"
#include "runtime/core/text_file.h"
#include "tests/error_text.h"
#include "tests/temp_dir.h"

namespace cpgen {
namespace {

std::string error_of(const std::function<void()>& f) { return testing::error_text(f); }

std::string parse_error(const std::string& text) {
  return error_of([&] { parse_json_text(text, "x.json", 4, "x needs 2"); });
}

// one_line: control bytes escaped (a newline in a file name), other bytes kept (UTF-8, quotes),
// and a message past the limit cut with its length.
TEST(JsonText, OneLineEscapesControlBytesAndCutsLongMessages) {
  EXPECT_EQ(one_line("a\nb\r\tc \"d\" \xc3\xa9"), "a\\x0ab\\x0d\\x09c \"d\" \xc3\xa9");
  EXPECT_EQ(one_line(std::string(10, 'x'), 4), "xxxx... (10 characters in all)");
  EXPECT_EQ(one_line(std::string(4, 'x'), 4), "xxxx");
}

TEST(JsonText, AKeyNamedTwiceInOneObjectIsRefusedWithItsPath) {
  EXPECT_EQ(parse_error(R"({"a": 1, "a": 2})"),
            "x.json: the top level: field \"a\" appears twice; each field may be given once");
  EXPECT_EQ(parse_error(R"({"e": [{"k": 1}, {"k": 1, "w": {"z": 1, "z": 2}}]})"),
            "x.json: e[1].w: field \"z\" appears twice; each field may be given once");
  // The same key in two objects, or in an object and one nested in it, is no duplicate.
  const nlohmann::json doc = parse_json_text(R"({"k": {"k": 1}, "e": [{"k": 1}, {"k": 2}]})", "x.json", 4);
  EXPECT_EQ(doc["e"][1]["k"], 2);
}

// The document is built from the parser's events (nlohmann's parser with a callback scanned the
// enclosing array every time an object ended: 400,000 objects took 27 s): every kind of value
// lands where the text puts it, as nlohmann's own parse places it.
TEST(JsonText, TheDocumentIsWhatTheTextSays) {
  const std::string text =
      R"({"shapes": [{"a": 1, "b": -2, "c": 18446744073709551615, "d": 0.5, "e": "t\u00e9\n"},)"
      R"( [], {}, [[1, [2]], {"x": null, "y": true, "z": false}]], "n": -9223372036854775808, "f": 1e300})";
  EXPECT_EQ(parse_json_text(text, "x.json", 8), nlohmann::json::parse(text));
  EXPECT_EQ(parse_json_text("[3]", "x.json", 4), nlohmann::json::parse("[3]"));
  EXPECT_EQ(parse_json_text("\"just a string\"", "x.json", 4), "just a string");
  std::string many = "[";
  for (int i = 0; i < 20000; ++i) many += std::string(i ? "," : "") + R"({"i": )" + std::to_string(i) + "}";
  many += "]";
  const nlohmann::json doc = parse_json_text(many, "x.json", 4);
  ASSERT_EQ(doc.size(), 20000u);
  EXPECT_EQ(doc[19999]["i"], 19999);
}

TEST(JsonText, NestingPastTheLimitIsRefusedWithItsPathAndHint) {
  EXPECT_NO_THROW(parse_json_text("[[[[1]]]]", "x.json", 4));
  EXPECT_EQ(parse_error("[[[[[1]]]]]"), "x.json: JSON nested deeper than 4 levels at [0][0][0][0]; x needs 2");
  EXPECT_EQ(error_of([] { parse_json_text(R"({"a": {"b": {"c": {"d": {}}}}})", "y", 4); }),
            "y: JSON nested deeper than 4 levels at a.b.c.d");
  // Far past any stack's depth: refused at the limit, not parsed.
  EXPECT_NE(parse_error(std::string(200000, '[')).find("nested deeper than 4 levels"), std::string::npos);
}

TEST(JsonText, ASyntaxErrorNamesLineAndColumnOnOneLine) {
  const std::string cut = parse_error("{\"a\": [1,\n 2,");
  EXPECT_EQ(cut.rfind("x.json: not valid JSON at line 2, column 4 (the text ends early; is it truncated?): ", 0), 0u)
      << cut;
  const std::string comma = parse_error("{\"a\": 1,}");
  EXPECT_EQ(comma.rfind("x.json: not valid JSON at line 1, column 9: ", 0), 0u) << comma;
  EXPECT_EQ(comma.find("json.exception"), std::string::npos) << comma;
  EXPECT_EQ(comma.find("ends early"), std::string::npos) << comma;
  const std::string newline = parse_error("{\"a\": \"x\ny\"}");
  EXPECT_EQ(newline.find('\n'), std::string::npos) << newline;
  EXPECT_NE(newline.find("U+000A"), std::string::npos) << newline;
  EXPECT_NE(parse_error("{\"a\": 1e400}").find("at line 1, column 7: number overflow"), std::string::npos);
}

TEST(JsonText, EmptyTextIsNamedAsSuch) {
  EXPECT_EQ(parse_error(""), "x.json: empty; expected JSON text");
  EXPECT_EQ(parse_error(" \n\t\r"), "x.json: empty; expected JSON text");
}

TEST(JsonText, PrintableEscapesWhatWouldBreakALineAndCuts) {
  EXPECT_EQ(printable("a\nb\"c\\d\xff"), "a\\x0ab\\\"c\\\\d\\xff");
  EXPECT_EQ(printable("abcdef", 3), "abc...");
  EXPECT_EQ(in_quotes("k"), "\"k\"");
}

TEST(JsonText, ReadJsonFileRefusesAsTheTextReaderAndTheParserDo) {
  testing::TempDir dir("json_text");
  const std::string path = dir.path() + "/a.json";
  std::ofstream(path) << R"({"a": 1, "a": 2})";
  EXPECT_EQ(error_of([&] { read_json_file(path, "import: a.json", "a JSON file", kMaxJsonFileBytes, kMaxJsonDepth); }),
            "import: a.json: the top level: field \"a\" appears twice; each field may be given once");
  std::ofstream(path, std::ios::binary) << std::string("{}\0{}", 5);
  EXPECT_NE(error_of([&] { read_json_file(path, "l", "a cache", kMaxJsonFileBytes, kMaxJsonDepth); })
                .find("l: a NUL byte at line 1, column 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_json_file(dir.path(), "l", "a cache", kMaxJsonFileBytes, kMaxJsonDepth); })
                .find("is a directory, not a cache"),
            std::string::npos);
  std::ofstream(path) << R"({"a": [1, 2]})";
  EXPECT_EQ(read_json_file(path, "l", "a cache", kMaxJsonFileBytes, kMaxJsonDepth)["a"][1], 2);
}

}  // namespace
}  // namespace cpgen
