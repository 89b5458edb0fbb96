// The reference vector sets the suite runs on (tests/test_util.h): the in-repo set is complete and
// readable, optional sets are used when present, and the sets in use are reported.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <iterator>
#include <set>

#include "runtime/ring/vectors.h"
#include "test_util.h"

namespace cpgen {
namespace {

// The cases tools/vectors/make_vectors.py writes; tests pick some of them by name.
const char* const kInRepoCases[] = {
    "mha_causal_hd64_s64",   "mha_full_hd64_s32_b2",  "gqa2_causal_hd128_s32",
    "gqa4_causal_hd64_s32",  "mqa_causal_hd96_s48",   "mha_full_hd256_s32",
    "mha_window16_hd64_s64", "mha_causal_hd64_s64_large_logits",
};

TEST(VectorSets, InRepoSetIsComplete) {
  const std::string dir = testing::vectors_dir();
  ASSERT_TRUE(std::filesystem::is_directory(dir))
      << dir << " is missing; it is part of the repository (tools/vectors/make_vectors.py writes it)";
  EXPECT_TRUE(std::filesystem::is_regular_file(dir + "/partitions.json")) << dir << "/partitions.json is missing";
  std::set<int64_t> head_dims, groups;
  bool causal = false, full = false, window = false, large_logits = false;
  for (const char* name : kInRepoCases) {
    const std::string path = dir + "/" + name + ".json";
    ASSERT_TRUE(std::filesystem::is_regular_file(path)) << path << " is missing";
    const AttentionVectors vec = load_attention_vectors(path);
    EXPECT_EQ(vec.name, name);
    head_dims.insert(vec.shape.head_dim);
    (vec.shape.causal ? causal : full) = true;
    window = window || vec.shape.window_left >= 0;
    groups.insert(vec.shape.q_heads / vec.shape.kv_heads);
    for (double lse : vec.lse) large_logits = large_logits || lse > 50;
  }
  EXPECT_EQ(head_dims, (std::set<int64_t>{64, 96, 128, 256}));
  EXPECT_EQ(groups, (std::set<int64_t>{1, 2, 4}));
  EXPECT_TRUE(causal && full && window && large_logits)
      << "the set must cover causal, full, a window and large logits";
}

TEST(VectorSets, ListsTheSetsInUse) {
  const auto& sets = testing::vector_sets();
  ASSERT_FALSE(sets.empty());
  EXPECT_EQ(sets.front().name, "repo");
  EXPECT_EQ(sets.front().dir, testing::vectors_dir());
  const std::string shared =
      (std::filesystem::path(testing::source_dir()) / ".." / "shared" / "vectors").lexically_normal().string();
  bool shared_used = false;
  for (const auto& set : sets) shared_used = shared_used || set.name == "shared";
  EXPECT_EQ(shared_used, std::filesystem::is_directory(shared))
      << "../shared/vectors is used exactly when it exists";
  // Every file vector_files() returns belongs to one of the sets, and each set contributes.
  const auto files = testing::vector_files();
  for (const auto& set : sets) {
    int count = 0;
    for (const auto& f : files)
      if (std::filesystem::path(f).parent_path() == set.dir) ++count;
    std::printf("  vector set %s: %s, %d case(s)\n", set.name.c_str(), set.dir.c_str(), count);
    RecordProperty("vector_set_" + set.name, set.dir);
    if (set.name == "repo") EXPECT_EQ(count, static_cast<int>(std::size(kInRepoCases)));
  }
  std::set<std::string> names;
  for (const auto& f : files) EXPECT_TRUE(names.insert(testing::vector_case_name(f)).second) << f;
  EXPECT_EQ(testing::vector_case_name(testing::vectors_dir() + "/mha_full_hd64_s32_b2.json"),
            "repo_mha_full_hd64_s32_b2");
}

}  // namespace
}  // namespace cpgen
