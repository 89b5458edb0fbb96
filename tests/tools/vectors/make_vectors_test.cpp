// tools/vectors/make_vectors.py: the committed tests/data/vectors are exactly what the generator
// writes. Regenerates into a temporary folder with python3 + numpy (skips, saying why, where
// numpy is missing) and compares every file: metadata and bf16 inputs exactly, float64 outputs
// within 1e-11 of each tensor's largest magnitude (the files keep 13 digits). Another BLAS sums
// in another order, and the rounding that leaves scales with the terms summed, not with the
// result: with pip's numpy 2.4 (OpenBLAS, as on the GPU image) gradients near zero differed from
// the committed ones by up to 1.75 times their own size, and every output by at most 3.1e-13 of
// its tensor's largest value. A change to the generator's math moves outputs by far more.
// And the generator against independent vector sets, where one is present.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

namespace fs = std::filesystem;

// The first python3 that can import numpy: the one on PATH, else Debian's (tools/setup.sh
// installs python3-numpy for /usr/bin/python3; a PATH python may be a separate installation).
std::string python_with_numpy() {
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    const std::string probe = std::string(python) + " -c 'import numpy' >/dev/null 2>&1";
    const int status = std::system(probe.c_str());
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return python;
  }
  return "";
}

std::vector<std::string> json_names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".json") names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Outputs are compared with a tolerance; everything else must be identical.
bool is_output(const std::string& key) {
  return key == "out" || key == "lse" || key == "dq" || key == "dk" || key == "dv";
}

void expect_same_case(const nlohmann::json& committed, const nlohmann::json& fresh, const std::string& file) {
  ASSERT_EQ(committed.size(), fresh.size()) << file << ": different fields";
  for (const auto& [key, value] : fresh.items()) {
    ASSERT_TRUE(committed.contains(key)) << file << ": committed file lacks '" << key << "'";
    if (!is_output(key)) {
      EXPECT_EQ(committed[key], value) << file << ": field '" << key << "' differs";
      continue;
    }
    const auto a = committed[key].get<std::vector<double>>();
    const auto b = value.get<std::vector<double>>();
    ASSERT_EQ(a.size(), b.size()) << file << " " << key;
    double scale = 0;
    for (double x : a) scale = std::max(scale, std::abs(x));
    for (size_t i = 0; i < a.size(); ++i) {
      const double bound = 1e-11 * std::max(scale, std::abs(b[i]));
      ASSERT_LE(std::abs(a[i] - b[i]), bound)
          << file << " " << key << "[" << i << "]: committed " << a[i] << ", generator " << b[i];
    }
  }
}

TEST(MakeVectors, CommittedFilesAreWhatTheGeneratorWrites) {
  const std::string python = python_with_numpy();
  if (python.empty()) GTEST_SKIP() << "python3 with numpy not found (tools/setup.sh installs python3-numpy)";
  testing::TempDir dir("make_vectors");
  const std::string script = testing::source_dir() + "/tools/vectors/make_vectors.py";
  const std::string command = python + " '" + script + "' '" + dir.path() + "' 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;

  const std::string committed_dir = testing::vectors_dir();
  const auto names = json_names(dir.path());
  ASSERT_EQ(json_names(committed_dir), names) << "regenerate with: " << script << " " << committed_dir;
  ASSERT_GE(names.size(), 2u);
  for (const std::string& name : names) {
    const auto committed = testing::load_json(committed_dir + "/" + name);
    const auto fresh = testing::load_json(dir.path() + "/" + name);
    if (name == "partitions.json") {
      EXPECT_EQ(committed, fresh) << name;
    } else {
      expect_same_case(committed, fresh, name);
    }
  }
  // Format 2 (packed documents, two-sided window, softcap) goes to the v2/ subfolder.
  const auto v2_names = json_names(dir.path() + "/v2");
  ASSERT_EQ(json_names(committed_dir + "/v2"), v2_names) << "regenerate with: " << script << " " << committed_dir;
  ASSERT_GE(v2_names.size(), 3u);
  for (const std::string& name : v2_names)
    expect_same_case(testing::load_json(committed_dir + "/v2/" + name),
                     testing::load_json(dir.path() + "/v2/" + name), "v2/" + name);
}

// The generator's math against vectors made elsewhere: where an independent set is present, its
// expected tensors are recomputed from its inputs and must agree to the digits it keeps.
TEST(MakeVectors, AgreesWithEveryOtherVectorSet) {
  const std::string python = python_with_numpy();
  if (python.empty()) GTEST_SKIP() << "python3 with numpy not found (tools/setup.sh installs python3-numpy)";
  int checked = 0;
  for (const auto& set : testing::vector_sets()) {
    if (set.name == "repo") continue;
    const std::string command = python + " '" + testing::source_dir() + "/tools/vectors/make_vectors.py' --check '" +
                                set.dir + "' >/dev/null 2>&1";
    const int status = std::system(command.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "disagrees with " << set.dir << ": run " << command;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "only the in-repo vector set is present";
}

}  // namespace
}  // namespace cpgen
