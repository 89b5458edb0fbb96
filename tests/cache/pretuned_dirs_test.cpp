// Where the shipped caches are searched (cache/pretuned.h): $CPGEN_CACHES_DIR first, then, for the
// library in its build tree, the source tree's caches/; and `cpgen explain` reports the folders.
#include "cache/pretuned.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "cache/database.h"
#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

const std::string kSourceCaches = std::string(CPGEN_SOURCE_DIR) + "/caches";

TEST(PretunedDirs, BuildTreeUsesTheSourceCachesOnly) {
  testing::ScopedEnv env("CPGEN_CACHES_DIR", nullptr);
  EXPECT_EQ(default_cache_dirs(), std::vector<std::string>{kSourceCaches});
}

TEST(PretunedDirs, EnvironmentFoldersComeFirstInOrder) {
  testing::ScopedEnv env("CPGEN_CACHES_DIR", "/site/a::/site/b");
  EXPECT_EQ(default_cache_dirs(), (std::vector<std::string>{"/site/a", "/site/b", kSourceCaches}));
}

TEST(PretunedDirs, LoadRecordsEveryFolderAndWhetherItExists) {
  const PretunedCaches caches = load_pretuned_caches({"/no/such/cpgen/caches", kSourceCaches});
  ASSERT_EQ(caches.dirs.size(), 2u);
  EXPECT_EQ(caches.dirs[0].path, "/no/such/cpgen/caches");
  EXPECT_FALSE(caches.dirs[0].exists);
  EXPECT_EQ(caches.dirs[1].path, kSourceCaches);
  EXPECT_TRUE(caches.dirs[1].exists);
  EXPECT_FALSE(caches.files.empty());
}

// A cache file with a NUL byte after its document is skipped (the parser took the NUL for the end
// and never read what followed); the folder's other caches load.
TEST(PretunedDirs, ACacheWithANulByteIsSkipped) {
  testing::TempDir dir("pretuned_nul");
  const std::string good = R"({"format": "cpgen-tuning-cache", "version": 1, "entries": []})";
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"a.json", good},
                                   {"b.json", good + std::string("\0{\"entries\": 1}", 15)}}) {
    std::ofstream(dir.path() + "/" + name, std::ios::binary) << text;
  }
  const PretunedCaches caches = load_pretuned_caches({dir.path()});
  EXPECT_EQ(caches.files, std::vector<std::string>{dir.path() + "/a.json"});
}

// Only regular files are read: a FIFO named like a cache hung every kernel selection in its open.
// It is skipped with a one-line warning naming it; the folder's other caches load.
TEST(PretunedDirs, AFifoInTheFolderIsSkippedNotOpened) {
  testing::TempDir dir("pretuned_fifo");
  std::ofstream(dir.path() + "/a.json") << R"({"format": "cpgen-tuning-cache", "version": 1, "entries": []})";
  ASSERT_EQ(::mkfifo((dir.path() + "/b.json").c_str(), 0600), 0);
  std::string warning;
  const WarningSink previous = set_warning_sink([&](const std::string& w) { warning += w; });
  const PretunedCaches caches = load_pretuned_caches({dir.path()});
  set_warning_sink(previous);
  EXPECT_EQ(caches.files, std::vector<std::string>{dir.path() + "/a.json"});
  EXPECT_NE(warning.find(dir.path() + "/b.json: is not a regular file; a cache is read only from one"), std::string::npos)
      << warning;
  EXPECT_EQ(warning.find('\n'), std::string::npos) << warning;
}

// A cache with a field given twice (a second "entries" would hide the first), a winner flag that
// is no boolean or a field no cache has is skipped, as any malformed cache is.
TEST(PretunedDirs, ACacheWithAFieldGivenTwiceOrABadWinnerIsSkipped) {
  testing::TempDir dir("pretuned_twice");
  const std::string head = R"({"format": "cpgen-tuning-cache", "version": 1, )";
  const std::string entry = R"({"workload": {"dtype": "bf16"}, "kernel": "ring_fwd_bf16_hd128_causal_gqa1_bm128_bn64_w4_s2",
                                 "source": "default-heuristic")";
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"a.json", head + R"("entries": []})"},
                                   {"b.json", head + R"("entries": [], "entries": []})"},
                                   {"c.json", head + R"("entries": [)" + entry + R"(, "winner": "yes"}]})"},
                                   {"d.json", head + R"("entries": [)" + entry + R"(, "winner": true}]})"},
                                   {"e.json", head + R"("entries": [)" + entry + R"(, "winer": true}]})"}}) {
    std::ofstream(dir.path() + "/" + name) << text;
  }
  ::testing::internal::CaptureStderr();
  const PretunedCaches caches = load_pretuned_caches({dir.path()});
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(caches.files, (std::vector<std::string>{dir.path() + "/a.json", dir.path() + "/d.json"}));
  // Each skip says why in the readers' words (the winner's was nlohmann's type_error 302 before).
  EXPECT_NE(warnings.find(dir.path() + "/b.json: the top level: field \"entries\" appears twice"), std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find(dir.path() + "/c.json entry 0: field 'winner' must be true or false"), std::string::npos)
      << warnings;
  // A misspelt field is no field of an entry (it was ignored, and the entry read without it).
  EXPECT_NE(warnings.find(dir.path() + "/e.json entry 0: entry field 'winer' is not one cpgen writes"), std::string::npos)
      << warnings;
  EXPECT_EQ(warnings.find("json.exception"), std::string::npos) << warnings;
}

// A pattern naming a field no workload has, or giving a field a value of another type, matched
// nothing and said nothing (pattern_matches takes both for a mismatch); the file is skipped with
// the reason, as for any malformed entry. Every field the shipped caches name is accepted.
TEST(PretunedDirs, APatternWithAnUnknownFieldOrAWrongTypeIsSkipped) {
  testing::TempDir dir("pretuned_pattern");
  const std::string head = R"({"format": "cpgen-tuning-cache", "version": 1, "entries": [{"workload": )";
  const std::string tail =
      R"(, "kernel": "ring_fwd_bf16_hd128_causal_gqa1_bm128_bn64_w4_s2", "source": "default-heuristic"}]})";
  for (const auto& [name, pattern] :
       {std::pair<std::string, std::string>{"a.json", R"({"dtype": "bf16", "head_dim": 128, "causal": true, "gqa_group": 1,
                                                        "arch": "sm_90a", "window_left": 4096, "softcap": false})"},
        {"b.json", R"({"head_dims": 128})"},
        {"c.json", R"({"causal": "yes"})"},
        {"d.json", R"({"head_dim": "128"})"},
        {"e.json", R"({"gqa_group": 1.0})"}}) {
    std::ofstream(dir.path() + "/" + name) << head + pattern + tail;
  }
  ::testing::internal::CaptureStderr();
  const PretunedCaches caches = load_pretuned_caches({dir.path()});
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(caches.files, std::vector<std::string>{dir.path() + "/a.json"}) << warnings;
  // Each file's reason; an integer field takes an integer (pattern_matches compares gqa_group as
  // one, and 1.0 matched nothing: a reviewer's finding).
  for (const char* reason : {"/b.json entry 0: workload field 'head_dims' is not a workload field; known: ",
                             "/c.json entry 0: workload field 'causal' must be true or false; got \"yes\"",
                             "/d.json entry 0: workload field 'head_dim' must be an integer; got \"128\"",
                             "/e.json entry 0: workload field 'gqa_group' must be an integer; got 1.0"})
    EXPECT_NE(warnings.find(dir.path() + reason), std::string::npos) << reason << "\n" << warnings;
}

// A malformed cache in an earlier folder is skipped and hides no later folder's file of its name
// (it did: the name was taken before the file was read).
TEST(PretunedDirs, AMalformedCacheHidesNoOtherFoldersCopy) {
  testing::TempDir first("pretuned_first"), second("pretuned_second");
  const std::string good = R"({"format": "cpgen-tuning-cache", "version": 1, "entries": []})";
  std::ofstream(first.path() + "/shared.json") << "{ not json";
  std::ofstream(second.path() + "/shared.json") << good;
  const PretunedCaches caches = load_pretuned_caches({first.path(), second.path()});
  EXPECT_EQ(caches.files, std::vector<std::string>{second.path() + "/shared.json"});
}

TEST(PretunedDirs, ExplainListsTheFoldersItSearched) {
  const std::string shape =
      "'{\"name\": \"s\", \"batch\": 1, \"q_heads\": 8, \"kv_heads\": 2, \"head_dim\": 128, "
      "\"seq_len\": 8192, \"cp_size\": 2, \"dtype\": \"bf16\", \"causal\": true}'";
  testing::TempDir dir("explain_dirs");
  const std::string db = "--db " + dir.path() + "/absent.db";  // explain creates no database
  auto r = testing::run_cli("explain --json --arch sm_90 " + db + " --shape " + shape);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  ASSERT_TRUE(doc.contains("cache_dirs")) << r.out;
  bool source_listed = false;
  for (const auto& d : doc["cache_dirs"])
    if (d.at("path") == kSourceCaches) source_listed = d.at("exists").get<bool>();
  EXPECT_TRUE(source_listed) << doc["cache_dirs"].dump();
  EXPECT_FALSE(doc.at("cache_files").empty());

  r = testing::run_cli("explain --arch sm_90 " + db + " --shape " + shape);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("pretuned caches searched: " + kSourceCaches + "\n"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace cpgen
