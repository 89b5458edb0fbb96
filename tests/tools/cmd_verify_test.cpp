// cpgen verify: the whole ring from the command line, its report, its --output file and its
// exit codes (0 within tolerance, 1 above, 2 bad input with one line).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "runtime/ring/vectors.h"
#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

using testing::line_count;
using testing::run_cli;

std::string vectors(const std::string& name) { return testing::vectors_dir() + "/" + name; }

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("cpgen_verify_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(CmdVerify, PassesOnEveryTensorAndReportsJson) {
  const auto r = run_cli("verify --vectors " + vectors("mqa_causal_hd96_s48.json") +
                         " --scheme zigzag --ranks 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc.at("name"), "mqa_causal_hd96_s48");
  EXPECT_EQ(doc.at("backend"), "cpu");
  EXPECT_EQ(doc.at("scheme"), "zigzag");
  EXPECT_EQ(doc.at("ranks"), 4);
  EXPECT_TRUE(doc.at("ok").get<bool>());
  const auto& checks = doc.at("checks");
  ASSERT_EQ(checks.size(), 5u);
  const char* tensors[] = {"out", "lse", "dq", "dk", "dv"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(checks[i].at("tensor"), tensors[i]);
    EXPECT_EQ(checks[i].at("metric"), "relative Frobenius");
    EXPECT_DOUBLE_EQ(checks[i].at("limit").get<double>(), 1e-5);
    EXPECT_TRUE(checks[i].at("ok").get<bool>());
    const double e = checks[i].at("error").get<double>();
    EXPECT_LT(e, 1e-5) << tensors[i];
    EXPECT_GT(e, 0) << tensors[i] << ": a float32 path is not exact; 0 means nothing was compared";
  }
  EXPECT_TRUE(doc.at("failed").empty());
}

// Issue 11's acceptance through the command: every format-2 file, every scheme, N in
// {1, 2, 3, 5, 8}, all five tensors within 1e-5 on the CPU ring.
TEST(CmdVerify, PassesOnEveryFormat2FileSchemeAndRingSize) {
  const auto files = testing::vector_files_v2();
  ASSERT_GE(files.size(), 3u) << "the repo's v2 set has three cases";
  for (const std::string& file : files)
    for (const char* scheme : {"contiguous", "zigzag", "zigzag-token", "striped"})
      for (int n : {1, 2, 3, 5, 8}) {
        const auto r = run_cli("verify --vectors " + file + " --scheme " + scheme + " --ranks " +
                               std::to_string(n) + " --json");
        ASSERT_EQ(r.exit_code, 0) << file << " " << scheme << " " << n << "\n" << r.out << r.err;
        const auto doc = nlohmann::json::parse(r.out);
        ASSERT_EQ(doc.at("checks").size(), 5u);
        for (const auto& check : doc.at("checks"))
          EXPECT_LT(check.at("error").get<double>(), 1e-5) << file << " " << scheme << " " << n << " " << check;
      }
}

TEST(CmdVerify, HumanReportNamesEveryTensor) {
  const auto r = run_cli("verify --vectors " + vectors("mha_window16_hd64_s64.json") +
                         " --scheme striped --ranks 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* t : {"out ", "lse ", "dq ", "dk ", "dv "})
    EXPECT_NE(r.out.find(t), std::string::npos) << t << " missing from:\n" << r.out;
  EXPECT_NE(r.out.find("striped over 8 ranks"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(r.out.size() - 3), "ok\n");
}

TEST(CmdVerify, OutputFileHasTheVectorsLayout) {
  const std::string out_path = temp_path("results.json");
  const auto r = run_cli("verify --vectors " + vectors("mha_full_hd256_s32.json") +
                         " --scheme zigzag-token --ranks 2 --output " + out_path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = testing::load_json(out_path);
  std::filesystem::remove(out_path);
  const AttentionVectors vec = load_attention_vectors(vectors("mha_full_hd256_s32.json"));
  EXPECT_EQ(doc.at("batch"), vec.shape.batch);
  EXPECT_EQ(doc.at("q_heads"), vec.shape.q_heads);
  EXPECT_EQ(doc.at("kv_heads"), vec.shape.kv_heads);
  EXPECT_EQ(doc.at("head_dim"), vec.shape.head_dim);
  EXPECT_EQ(doc.at("seq_len"), vec.seq_len);
  EXPECT_EQ(doc.at("causal"), vec.shape.causal);
  EXPECT_TRUE(doc.at("window").is_null());
  EXPECT_DOUBLE_EQ(doc.at("softmax_scale").get<double>(), vec.shape.scale);
  EXPECT_EQ(doc.at("scheme"), "zigzag-token");
  EXPECT_EQ(doc.at("cp_size"), 2);
  // Gathered back into global order: each tensor matches the vectors element for element.
  const std::pair<const char*, const std::vector<double>*> tensors[] = {
      {"out", &vec.out}, {"lse", &vec.lse}, {"dq", &vec.dq}, {"dk", &vec.dk}, {"dv", &vec.dv}};
  for (const auto& [name, expected] : tensors) {
    const auto got = doc.at(name).get<std::vector<double>>();
    ASSERT_EQ(got.size(), expected->size()) << name;
    EXPECT_LT(relative_error(got, *expected), 1e-5) << name;
  }
}

TEST(CmdVerify, ExitsOneAboveTolerance) {
  // A copy of a vectors file whose expected dk is wrong in one element.
  auto doc = testing::load_json(vectors("mqa_causal_hd96_s48.json"));
  doc["dk"][5] = doc["dk"][5].get<double>() + 1.0;
  const std::string path = temp_path("bad_dk.json");
  std::ofstream(path) << doc.dump();
  const auto r = run_cli("verify --vectors " + path + " --scheme contiguous --ranks 3");
  std::filesystem::remove(path);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAILED: dk above the limit"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAILED: out"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAIL\n"), std::string::npos) << "the dk line says FAIL:\n" << r.out;
}

struct BadInputCase {
  std::string args, message;
};

TEST(CmdVerify, BadInputExitsTwoWithOneLine) {
  const std::string file = vectors("mqa_causal_hd96_s48.json");
  const std::string not_json = temp_path("not_json.json");
  std::ofstream(not_json) << "{ this is not json";
  const BadInputCase cases[] = {
      {"--vectors " + file + " --scheme spiral --ranks 2",
       "scheme 'spiral' is not supported; allowed: contiguous, zigzag, zigzag-token, striped"},
      {"--vectors " + file + " --scheme zigzag --ranks 0", "--ranks: must be an integer 1..1024, got 0"},
      {"--vectors /no/such/file.json --scheme zigzag --ranks 2", "cannot open a vectors file: No such file or directory"},
      {"--vectors " + testing::vectors_dir() + " --scheme zigzag --ranks 2", "is a directory, not a vectors file"},
      {"--vectors " + vectors("partitions.json") + " --scheme zigzag --ranks 2",
       "expected \"cpgen-attention-vectors/1\""},
      {"--vectors " + not_json + " --scheme zigzag --ranks 2", "not valid JSON"},
      {"--vectors " + file + " --scheme zigzag --ranks 2 --backend tpu",
       "--backend 'tpu' is not available in this build; allowed: cpu"},
      {"--vectors " + file + " --scheme zigzag --ranks 2 --dtype bf16",
       "--dtype bf16 is not supported by --backend cpu; allowed: fp32"},
      {"--vectors " + file + " --scheme zigzag --ranks 2 --transport nccl",
       "--transport nccl is not supported by --backend cpu; allowed: threads"},
  };
  for (const BadInputCase& c : cases) {
    const auto r = run_cli("verify " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  std::filesystem::remove(not_json);
}

}  // namespace
}  // namespace cpgen

namespace cpgen {
namespace {

TEST(CmdVerify, OutputInAMissingFolderFailsBeforeTheRun) {
  // The vectors file does not exist either: the --output check must come first, before anything
  // is loaded or run.
  const auto r = run_cli("verify --vectors /no/such/vectors.json --scheme zigzag --ranks 2 --output /no/such/dir/x.json");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--output /no/such/dir/x.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("vectors.json"), std::string::npos) << "the run must not have started: " << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
}

// --output naming the --vectors file it reads (here through a "./" respelling) is refused before
// the run, and the vectors file stays as it was; it was overwritten with the results before.
TEST(CmdVerify, OutputOverItsOwnVectorsIsRefusedAndTheVectorsKept) {
  testing::TempDir dir("verify_out");
  const std::string copy = dir.path() + "/v.json";
  std::filesystem::copy_file(vectors("mha_causal_hd64_s64.json"), copy);
  const std::string before = testing::slurp(copy);
  const auto r = run_cli("verify --vectors " + copy + " --scheme zigzag --ranks 2 --output " + dir.path() + "/./v.json");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("is the same file as --vectors"), std::string::npos) << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_EQ(testing::slurp(copy), before);
}

TEST(CmdVerify, RanksBeyondAnIntNamesTheFieldAndTheRange) {
  for (const char* ranks : {"99999999999", "0", "-3"}) {
    const auto r = run_cli(std::string("verify --vectors x.json --scheme zigzag --ranks ") + ranks);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--ranks"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("1..1024"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(std::string("got ") + ranks), std::string::npos) << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
  }
}

}  // namespace
}  // namespace cpgen

// --shape '{...}' --random: a shapes entry on random inputs, checked on sampled positions.
namespace cpgen {
namespace {

std::string shape_arg(const std::string& fields) { return "--shape '{" + fields + "}'"; }

const char* kGqaCausal =
    "\"name\": \"gqa4\", \"q_heads\": 4, \"kv_heads\": 1, \"head_dim\": 64, \"seq_len\": 48, "
    "\"cp_size\": 3, \"dtype\": \"bf16\", \"causal\": true, \"scheme\": \"zigzag-token\"";

TEST(CmdVerifyRandom, PassesCausalAndFullAndGqaOnTheCpu) {
  const std::string shapes[] = {
      kGqaCausal,
      "\"q_heads\": 2, \"kv_heads\": 2, \"head_dim\": 64, \"seq_len\": 64, \"cp_size\": 4, "
      "\"dtype\": \"fp16\", \"causal\": false, \"batch\": 2",
      "\"q_heads\": 4, \"kv_heads\": 2, \"head_dim\": 96, \"seq_len\": 80, \"cp_size\": 2, "
      "\"dtype\": \"bf16\", \"causal\": true",
  };
  for (const std::string& fields : shapes) {
    // 16 sampled positions out of 48..80: the check really samples, shard ends included.
    const auto r = run_cli("verify " + shape_arg(fields) + " --random --sample-rows 16 --json");
    ASSERT_EQ(r.exit_code, 0) << fields << "\n" << r.out << r.err;
    const auto doc = nlohmann::json::parse(r.out);
    EXPECT_TRUE(doc.at("random").get<bool>());
    EXPECT_EQ(doc.at("seed"), 12);
    const auto positions = doc.at("sampled_positions").get<std::vector<int64_t>>();
    EXPECT_LT(positions.size(), doc.at("seq_len").get<size_t>());
    EXPECT_EQ(positions.size(), 16u);
    EXPECT_EQ(positions.front(), 0);
    EXPECT_EQ(positions.back(), doc.at("seq_len").get<int64_t>() - 1);
    ASSERT_EQ(doc.at("checks").size(), 5u);
    for (const auto& c : doc.at("checks")) {
      EXPECT_TRUE(c.at("ok").get<bool>()) << c.dump();
      EXPECT_GT(c.at("error").get<double>(), 0) << c.dump() << ": float32 is not exact; 0 means nothing compared";
      EXPECT_DOUBLE_EQ(c.at("limit").get<double>(), 1e-5);
    }
  }
}

// The CPU ring and the sampled reference take the shape's mask: a window changes the results (it
// was dropped, and both computed the unmasked problem); a layout is a note, the CPU ring reads bhsd.
TEST(CmdVerifyRandom, AMaskedShapeIsCheckedWithItsMask) {
  const std::string plain = temp_path("mask_plain.json"), windowed = temp_path("mask_window.json");
  const std::string base = "verify --random --sample-rows 10 ";
  const auto a = run_cli(base + shape_arg(kGqaCausal) + " --output " + plain);
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  const auto b = run_cli(base + shape_arg(std::string(kGqaCausal) + ", \"window\": {\"left\": 4, \"right\": null}, "
                                          "\"layout\": \"sbhd\"") + " --output " + windowed);
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  EXPECT_NE(testing::slurp(plain), testing::slurp(windowed)) << "the window changed nothing";
  EXPECT_NE(b.out.find("layout sbhd applies to the kernel backends"), std::string::npos) << b.out;
  // --output names the whole mask, as a format-2 vectors file does (it wrote format 1's window
  // alone: documents, softcap and a right side were lost).
  const std::string masked = temp_path("mask_all.json");
  const auto c = run_cli(base +
                         shape_arg("\"q_heads\": 2, \"kv_heads\": 1, \"head_dim\": 64, \"seq_len\": 64, \"cp_size\": 2, "
                                   "\"dtype\": \"bf16\", \"causal\": false, \"documents\": [20, 44], \"softcap\": 5, "
                                   "\"window\": {\"left\": 8, \"right\": 3}") +
                         " --output " + masked);
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  const auto doc = nlohmann::json::parse(testing::slurp(masked));
  EXPECT_EQ(doc.at("documents"), nlohmann::json::parse("[20, 44]")) << doc.dump().substr(0, 300);
  EXPECT_EQ(doc.at("softcap"), 5.0);
  EXPECT_EQ(doc.at("window"), nlohmann::json::parse(R"({"left": 8, "right": 3})"));
}

TEST(CmdVerifyRandom, TakesSchemeAndRanksFromTheEntryUnlessGiven) {
  auto r = run_cli("verify " + shape_arg(kGqaCausal) + " --random");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("zigzag-token over 3 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("seed 12"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("48 of 48 positions"), std::string::npos) << r.out;
  r = run_cli("verify " + shape_arg(kGqaCausal) + " --random --scheme striped --ranks 4 --seed 7 --sample-rows 12");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("striped over 4 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("seed 7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("first and last of every rank's shard"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(r.out.size() - 3), "ok\n");
}

TEST(CmdVerifyRandom, SameSeedSameOutputOtherSeedOtherInputs) {
  const std::string a = temp_path("seed_a.json"), b = temp_path("seed_b.json"), c = temp_path("seed_c.json");
  const std::string base = "verify " + shape_arg(kGqaCausal) + " --random --sample-rows 10 ";
  const auto ra = run_cli(base + "--seed 99 --output " + a);
  const auto rb = run_cli(base + "--seed 99 --output " + b);
  const auto rc = run_cli(base + "--seed 100 --output " + c);
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  ASSERT_EQ(rc.exit_code, 0) << rc.err;
  // The report names the output path, which differs; everything else is identical.
  auto without_path = [](std::string text, const std::string& path) {
    return text.replace(text.find(path), path.size(), "");
  };
  EXPECT_EQ(without_path(ra.out, a), without_path(rb.out, b));
  const auto da = testing::load_json(a), db = testing::load_json(b), dc = testing::load_json(c);
  for (const std::string& p : {a, b, c}) std::filesystem::remove(p);
  EXPECT_EQ(da, db);
  EXPECT_EQ(da.at("seed"), 99);
  EXPECT_EQ(da.at("cp_size"), 3);
  EXPECT_EQ(da.at("out").size(), 4u * 48 * 64);
  EXPECT_NE(da.at("out"), dc.at("out"));
}

TEST(CmdVerifyRandom, BadSourcesExitTwoWithOneLine) {
  const std::string file = vectors("mqa_causal_hd96_s48.json");
  const BadInputCase cases[] = {
      {"--random --scheme zigzag --ranks 2", "--random needs --shape"},
      {shape_arg(kGqaCausal), "--shape needs --random"},
      {shape_arg(kGqaCausal) + " --random --vectors " + file, "exactly one of --vectors FILE or --shape"},
      {"--scheme zigzag --ranks 2", "exactly one of --vectors FILE or --shape"},
      {"--vectors " + file + " --ranks 2", "--scheme is required with --vectors"},
      {"--vectors " + file + " --scheme zigzag", "--ranks is required with --vectors"},
      {"--shape '{\"q_heads\": 4}' --random", "--shape: shapes[0]: missing required field \"kv_heads\""},
      {"--shape '{\"q_heads\": 4, \"kv_heads\": 1, \"head_dim\": 80, \"seq_len\": 64, \"cp_size\": 2, "
       "\"dtype\": \"bf16\", \"causal\": true}' --random",
       "head_dim 80 is not supported; allowed: 64, 96, 128, 256"},
      {"--shape 'not json' --random", "--shape: not valid JSON"},
      // bench's KEY=VALUE syntax gets a line saying what this --shape takes.
      {"--shape 'q_heads=8' --random", "--shape: 'q_heads=8' is not a JSON object; a shape here is one shapes-file entry"},
      {shape_arg(kGqaCausal) + " --random --seed -1", "--seed"},
      {shape_arg(kGqaCausal) + " --random --dtype bf16", "--dtype bf16 is not supported by --backend cpu"},
      {shape_arg(kGqaCausal) + " --random --transport nccl", "--transport nccl is not supported by --backend cpu"},
      {shape_arg("\"batch\": 64, \"q_heads\": 32, \"kv_heads\": 8, \"head_dim\": 128, \"seq_len\": 131072, "
                 "\"cp_size\": 8, \"dtype\": \"bf16\", \"causal\": true") + " --random",
       "--backend cpu: shape shape[0] needs about 2176.0 GiB of memory"},
      // The emulator too: a shape it could hold but would run for hours (it ran, or failed with
      // bad_alloc, exit 1).
      {shape_arg("\"q_heads\": 8, \"kv_heads\": 8, \"head_dim\": 64, \"seq_len\": 16384, \"cp_size\": 2, "
                 "\"dtype\": \"bf16\", \"causal\": true") + " --random --backend emulated",
       "--backend emulated: shape shape[0] is 5.5e+11 FLOPs of attention"},
      // The CPU backend likewise where the pairs would take it hours (2^36 at most).
      {shape_arg("\"q_heads\": 1, \"kv_heads\": 1, \"head_dim\": 64, \"seq_len\": 300000, \"cp_size\": 2, "
                 "\"dtype\": \"bf16\", \"causal\": true") + " --random",
       "--backend cpu: shape shape[0] is 9e+10 (query, key) pairs of attention"},
      // Options only --random reads were accepted and ignored beside a vectors file.
      {"--vectors " + file + " --scheme zigzag --ranks 2 --seed 99", "--seed and --sample-rows go with --shape"},
      {"--vectors " + file + " --scheme zigzag --ranks 2 --sample-rows 4", "--seed and --sample-rows go with --shape"},
  };
  for (const BadInputCase& c : cases) {
    const auto r = run_cli("verify " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

}  // namespace
}  // namespace cpgen
