// `cpgen plan` end to end: every malformed shapes file fails cleanly, and the plan of a real
// shape holds the numbers the planner promises.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace cpgen {
namespace {

using cpgen::testing::run_cli;

const std::string kSource = CPGEN_SOURCE_DIR;
const std::string kBadShapesDir = kSource + "/tests/data/bad_shapes";

// Each file holds one defect; the message must name it with this text.
const std::map<std::string, std::string> kExpectedMessage = {
    {"batch_fraction.json", "batch must be an integer 1..65536 written without a fraction"},
    {"batch_integral_float.json", "batch must be an integer 1..65536 written without a fraction or exponent, got 2.0"},
    {"batch_negative.json", "batch must be an integer 1..65536, got -4"},
    {"causal_string.json", "causal must be true or false, got the string \"yes\""},
    {"cp_size_zero.json", "cp_size must be an integer 1..1024, got 0"},
    {"deep_nesting.json", "nested deeper than 32 levels"},
    {"dtype_unsupported.json", "dtype \"fp8\" is not supported; allowed: bf16, fp16"},
    {"duplicate_key.json", "shapes[0]: field \"q_heads\" appears twice"},
    {"duplicate_name.json", "shapes[1] (\"llama3-8b\"): name \"llama3-8b\" is already used by shapes[0]"},
    {"empty_file.json", "the file is empty"},
    {"empty_list.json", "shapes is empty"},
    {"gqa_group_unsupported.json", "kv_heads 2 gives a GQA group of 32"},
    {"head_dim_unsupported.json", "head_dim 80 is not supported; allowed: 64, 96, 128, 256"},
    {"documents_sum_wrong.json", "shapes[0] (\"packed\"): documents sum to 999; they must sum to seq_len 1000"},
    {"documents_empty.json", "documents must be an array of 1..1048576 document lengths, got an array of 0"},
    {"window_negative.json", "window.left must be an integer 0..1073741824, got -4096"},
    {"softcap_zero.json", "softcap must be a number > 0"},
    {"layout_unknown.json", "layout \"bsdh\" is not supported; allowed: bhsd, bshd, sbhd, thd"},
    {"kv_heads_not_dividing.json", "kv_heads 6 does not divide q_heads 32"},
    {"kv_heads_null.json", "kv_heads must be an integer 1..1024, got null"},
    {"missing_seq_len.json", "missing required field \"seq_len\""},
    {"missing_shapes.json", "unknown top-level field \"shape\"; allowed: shapes"},
    {"not_json.json", "not valid JSON at line 3, column 18"},
    {"not_utf8.json", "not valid JSON at line 2, column 18"},
    {"q_heads_string.json", "q_heads must be an integer 1..1024, got the string \"32\""},
    {"scheme_unsupported.json", "scheme \"ring\" is not supported"},
    {"second_shape_bad.json", "shapes[1] (\"second\"): head_dim 192 is not supported"},
    {"seq_len_huge_literal.json", "not valid JSON at line 2, column 95: number overflow parsing '1e400'"},
    {"seq_len_too_large.json", "seq_len must be an integer 1..1073741824, got 4294967296"},
    {"shapes_not_array.json", "shapes must be an array of shape objects, got an object"},
    {"softmax_scale_negative.json", "softmax_scale must be a number > 0 (leave it out for 1/sqrt(head_dim)), got -0.1"},
    {"top_level_array.json", "the top level must be an object"},
    {"unknown_field.json", "unknown field \"sq_len\"; allowed:"},
};

void expect_clean_bad_input(const testing::CliResult& r, const std::string& expected) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.out, "") << "stdout must stay empty on bad input";
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "not exactly one line: " << r.err;
  EXPECT_EQ(r.err.back(), '\n');
  EXPECT_EQ(r.err.rfind("cpgen: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << "expected '" << expected << "' in: " << r.err;
  for (char c : r.err) {
    const auto byte = static_cast<unsigned char>(c);
    EXPECT_TRUE(c == '\n' || (byte >= 0x20 && byte < 0x7f)) << "unprintable byte " << int(byte);
  }
}

TEST(CmdPlan, EveryMalformedShapesFileExitsTwoWithOneLine) {
  std::set<std::string> seen;
  for (const auto& entry : std::filesystem::directory_iterator(kBadShapesDir)) {
    const std::string file = entry.path().filename().string();
    SCOPED_TRACE(file);
    const auto expected = kExpectedMessage.find(file);
    ASSERT_NE(expected, kExpectedMessage.end()) << "add the expected message for " << file;
    const auto r = run_cli("plan --shapes " + entry.path().string());
    expect_clean_bad_input(r, expected->second);
    // The message starts with the file it is about.
    EXPECT_NE(r.err.find(entry.path().string() + ": "), std::string::npos) << r.err;
    seen.insert(file);
  }
  EXPECT_EQ(seen.size(), kExpectedMessage.size()) << "a listed bad shapes file is missing";
  EXPECT_GE(seen.size(), 15u);
}

TEST(CmdPlan, MissingFileAndBadOptionsExitTwo) {
  expect_clean_bad_input(run_cli("plan --shapes /nonexistent/shapes.json"),
                         "/nonexistent/shapes.json: cannot open a shapes file: No such file or directory");
  const std::string good = kSource + "/examples/shapes/llama3-8b-128k-cp8.json";
  expect_clean_bad_input(run_cli("plan --shapes " + good + " --tflops 0"),
                         "--tflops: must be a finite number > 0 (10^12 FLOP/s), got '0'");
  expect_clean_bad_input(run_cli("plan --shapes " + good + " --link-gbps -5"),
                         "--link-gbps: must be a finite number > 0 (GB/s, 10^9 bytes per second), got '-5'");
  // An empty value was read as 0 and reported as "got 0.000000".
  expect_clean_bad_input(run_cli("plan --shapes " + good + " --link-gbps ''"), "(after --link-gbps) is empty");
  expect_clean_bad_input(run_cli("plan --shapes " + good + " --link-gbps inf"), "--link-gbps");
  expect_clean_bad_input(run_cli("plan --shapes " + good + " --tflops fast"), "--tflops");
  expect_clean_bad_input(run_cli("plan"), "--shapes");
}

TEST(CmdPlan, JsonHasEveryFieldAndRecommendsZigzagForACausalShape) {
  const auto r = run_cli("plan --json --shapes " + kSource + "/examples/shapes/llama3-8b-128k-cp8.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const auto out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out.at("link_gbps"), 400.0);
  EXPECT_EQ(out.at("tflops"), 400.0);
  ASSERT_EQ(out.at("entries").size(), 4u);
  std::map<std::string, nlohmann::json> by_scheme;
  for (const auto& e : out.at("entries")) {
    for (const char* key : {"shape", "scheme", "work_imbalance", "bytes_per_step", "bytes_total", "ring_extra_bytes",
                            "allgather_extra_bytes", "compute_comm_ratio", "comm_hidden", "applicable", "recommended"}) {
      EXPECT_TRUE(e.contains(key)) << key << " missing in " << e.dump();
    }
    EXPECT_EQ(e.at("shape"), "llama3-8b-128k-cp8");
    EXPECT_TRUE(e.at("applicable").get<bool>());
    EXPECT_EQ(e.at("bytes_per_step").get<int64_t>(), 67108864);
    EXPECT_EQ(e.at("bytes_total").get<int64_t>(), 56 * int64_t{67108864});
    EXPECT_TRUE(e.at("bytes_total").is_number_integer()) << e.at("bytes_total").dump();
    EXPECT_EQ(e.at("ring_extra_bytes").get<int64_t>(), 2 * 67108864);
    EXPECT_EQ(e.at("allgather_extra_bytes").get<int64_t>(), 7 * 67108864);
    EXPECT_TRUE(e.at("comm_hidden").get<bool>());
    EXPECT_GT(e.at("compute_comm_ratio").get<double>(), 1.0);
    by_scheme[e.at("scheme").get<std::string>()] = e;
  }
  ASSERT_EQ(by_scheme.size(), 4u);
  EXPECT_LE(by_scheme.at("zigzag").at("work_imbalance").get<double>(), 1.05);
  EXPECT_GT(by_scheme.at("contiguous").at("work_imbalance").get<double>(), 1.5);
  EXPECT_TRUE(by_scheme.at("zigzag").at("recommended").get<bool>());
  EXPECT_FALSE(by_scheme.at("contiguous").at("recommended").get<bool>());
  ASSERT_EQ(out.at("shapes").size(), 1u);
  EXPECT_EQ(out.at("shapes")[0].at("recommended"), "zigzag");
  EXPECT_EQ(out.at("shapes")[0].at("shape"), "llama3-8b-128k-cp8");
}

// One shape given inline, as explain, verify and bench take it: the same plan as a file holding it.
TEST(CmdPlan, OneShapeInlinePlansAsAFileHoldingIt) {
  const std::string shape =
      R"({"name": "s", "q_heads": 32, "kv_heads": 8, "head_dim": 128, "seq_len": 131072, "cp_size": 8, "dtype": "bf16", "causal": true})";
  const auto inline_run = run_cli("plan --json --shape '" + shape + "'");
  ASSERT_EQ(inline_run.exit_code, 0) << inline_run.err;
  const std::string file = ::testing::TempDir() + "/cmd_plan_inline_" + std::to_string(getpid()) + ".json";
  std::ofstream(file) << R"({"shapes": [)" << shape << "]}";
  const auto file_run = run_cli("plan --json --shapes " + file);
  std::filesystem::remove(file);
  ASSERT_EQ(file_run.exit_code, 0) << file_run.err;
  EXPECT_EQ(nlohmann::json::parse(inline_run.out), nlohmann::json::parse(file_run.out));
  expect_clean_bad_input(run_cli("plan --shape '" + shape + "' --shapes " + file),
                         "plan: give exactly one of --shape JSON or --shapes FILE");
  expect_clean_bad_input(run_cli("plan --shape '{\"q_heads\": 0}'"), "--shape");
}

// The table's header says the mask as it was understood (a window side left out is unbounded),
// so a reader sees the documents, window and softcap the plan counted.
TEST(CmdPlan, TheTableNamesTheShapesMask) {
  const auto r = run_cli(R"(plan --shape '{"name": "w", "q_heads": 8, "kv_heads": 2, "head_dim": 64, "seq_len": 8192, )"
                         R"("cp_size": 4, "dtype": "bf16", "causal": false, "window": {"left": 256}, )"
                         R"("documents": [4096, 4096], "softcap": 30}')");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("non-causal, 2 documents, window (256, unbounded), softcap 30; its scheme contiguous"),
            std::string::npos)
      << r.out;
}

TEST(CmdPlan, RatesChangeTheVerdictOnHiding) {
  const auto r = run_cli("plan --json --link-gbps 1 --tflops 400 --shapes " + kSource +
                         "/examples/shapes/llama3-8b-128k-cp8.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out.at("link_gbps"), 1.0);
  for (const auto& e : out.at("entries")) {
    EXPECT_FALSE(e.at("comm_hidden").get<bool>()) << e.dump();
    // 64 MiB over 1 GB/s.
    EXPECT_NEAR(e.at("step_comm_us").get<double>(), 67108864.0 / 1e9 * 1e6, 1e-3);
  }
}

TEST(CmdPlan, PlansALengthThatDoesNotDivideByVisiblePairs) {
  const auto dir = std::filesystem::temp_directory_path() / ("cpgen_plan_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "odd.json").string();
  // 24 positions over 8 ranks: zigzag cuts 16 chunks of 2 and 1, so its ranks' causal work differs.
  std::ofstream(path) << R"({"shapes": [{"name": "odd", "q_heads": 8, "kv_heads": 8, "head_dim": 64,
                              "seq_len": 24, "cp_size": 8, "dtype": "bf16", "causal": true,
                              "scheme": "striped"}]})";
  const auto r = run_cli("plan --json --shapes " + path);
  const auto text = run_cli("plan --shapes " + path);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = nlohmann::json::parse(r.out);
  for (const auto& e : out.at("entries")) {
    EXPECT_TRUE(e.at("applicable").get<bool>()) << e.dump();
    EXPECT_EQ(e.at("work_model"), "visible pairs") << e.dump();
    int64_t pairs = 0;
    for (const auto& steps : e.at("visible_pairs"))
      for (const auto& x : steps) pairs += x.get<int64_t>();
    EXPECT_EQ(pairs, 24 * 25 / 2) << e.dump();
    EXPECT_FALSE(e.at("work_imbalance").is_null());
  }
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("pairs the mask leaves visible"), std::string::npos) << text.out;
}

// Issue 11: a packed shape plans by per-rank tokens and mask-skipped ring steps.
TEST(CmdPlan, PackedShapeReportsRankTokensImbalanceAndSkippedSteps) {
  const auto dir = std::filesystem::temp_directory_path() / ("cpgen_plan_packed_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "packed.json").string();
  std::ofstream(path) << R"({"shapes": [{"name": "packed", "q_heads": 8, "kv_heads": 2, "head_dim": 64,
                              "seq_len": 1001, "cp_size": 3, "dtype": "bf16", "causal": true,
                              "documents": [600, 0, 1, 400], "window": {"left": 64, "right": null}}]})";
  const auto r = run_cli("plan --json --shapes " + path);
  const auto text = run_cli("plan --shapes " + path);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = nlohmann::json::parse(r.out);
  ASSERT_EQ(out.at("entries").size(), 4u);
  for (const auto& e : out.at("entries")) {
    const auto tokens = e.at("rank_tokens").get<std::vector<int64_t>>();
    ASSERT_EQ(tokens.size(), 3u) << e.dump();
    EXPECT_EQ(tokens[0] + tokens[1] + tokens[2], 1001);
    EXPECT_GE(e.at("token_imbalance").get<double>(), 1.0);
    EXPECT_EQ(e.at("ring_steps"), 9);
    EXPECT_GE(e.at("skipped_steps").get<int64_t>(), 0);
    if (e.at("scheme") == "contiguous") EXPECT_GE(e.at("skipped_steps").get<int64_t>(), 3) << e.dump();
  }
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("tokens per rank"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("ring steps skipped by the mask"), std::string::npos) << text.out;
}

// Shapes that differ only in their mask are planned each on its own: a file's repeated shapes
// are planned once, and the key that found them left the mask out, so a packed or windowed shape
// took the plain shape's plan (tiles work model, no skipped step).
TEST(CmdPlan, ShapesThatDifferOnlyInTheirMaskArePlannedApart) {
  const auto dir = std::filesystem::temp_directory_path() / ("cpgen_plan_masks_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string base = R"("q_heads": 8, "kv_heads": 8, "head_dim": 64, "seq_len": 4096, "cp_size": 4,
                              "dtype": "bf16", "causal": true, "scheme": "zigzag")";
  const auto together = (dir / "together.json").string(), alone = (dir / "alone.json").string();
  std::ofstream(together) << R"({"shapes": [{"name": "plain", )" << base << R"(},
      {"name": "packed", )" << base << R"(, "documents": [1024, 1024, 1024, 1024]},
      {"name": "windowed", )" << base << R"(, "window": {"left": 128, "right": 0}}]})";
  std::ofstream(alone) << R"({"shapes": [{"name": "packed", )" << base << R"(, "documents": [1024, 1024, 1024, 1024]},
      {"name": "windowed", )" << base << R"(, "window": {"left": 128, "right": 0}}]})";
  const auto r_together = run_cli("plan --json --shapes " + together);
  const auto r_alone = run_cli("plan --json --shapes " + alone);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r_together.exit_code, 0) << r_together.err;
  ASSERT_EQ(r_alone.exit_code, 0) << r_alone.err;
  // Each masked shape's entries as planned beside the plain shape and on their own.
  auto entries_of = [](const std::string& out, const std::string& name) {
    nlohmann::json picked = nlohmann::json::array();
    const nlohmann::json doc = nlohmann::json::parse(out);  // alive while its entries are read
    for (const auto& e : doc.at("entries"))
      if (e.at("shape") == name) picked.push_back(e);
    return picked;
  };
  for (const char* name : {"packed", "windowed"}) {
    const auto beside = entries_of(r_together.out, name), own = entries_of(r_alone.out, name);
    ASSERT_FALSE(own.empty()) << name;
    EXPECT_EQ(beside, own) << name;
    EXPECT_NE(beside, entries_of(r_together.out, "plain")) << name;
  }
}

TEST(CmdPlan, OneRankHasNoRatioInJson) {
  const auto dir = std::filesystem::temp_directory_path() / ("cpgen_plan_test1_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "one.json").string();
  std::ofstream(path) << R"({"shapes": [{"q_heads": 8, "kv_heads": 2, "head_dim": 96, "seq_len": 4096,
                              "cp_size": 1, "dtype": "fp16", "causal": true}]})";
  const auto r = run_cli("plan --json --shapes " + path);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = nlohmann::json::parse(r.out);
  ASSERT_EQ(out.at("entries").size(), 4u);
  for (const auto& e : out.at("entries")) {
    EXPECT_EQ(e.at("shape"), "shape[0]");
    EXPECT_TRUE(e.at("compute_comm_ratio").is_null()) << "nothing travels with one rank";
    EXPECT_EQ(e.at("bytes_total").get<int64_t>(), 0);
    EXPECT_TRUE(e.at("comm_hidden").get<bool>());
  }
}

TEST(CmdPlan, HelpStatesTheUnits) {
  const auto r = run_cli("plan --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("GB/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TFLOP/s"), std::string::npos) << r.out;
}

TEST(CmdPlan, TablePlansEveryExample) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kSource + "/examples/shapes")) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    SCOPED_TRACE(entry.path().string());
    const auto r = run_cli("plan --shapes " + entry.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    for (const char* scheme : {"contiguous", "zigzag", "zigzag-token", "striped"}) {
      EXPECT_NE(r.out.find(std::string("\n  ") + scheme + " "), std::string::npos) << scheme;
    }
    EXPECT_NE(r.out.find("recommended: "), std::string::npos);
  }
  EXPECT_GE(files, 3);
  const auto r = run_cli("plan --shapes " + kSource + "/examples/shapes/video-dit-full-cp8.json");
  EXPECT_NE(r.out.find("recommended: contiguous"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace cpgen
