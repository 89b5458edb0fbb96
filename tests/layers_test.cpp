// The layer rule of docs/design.md: a source file includes only files of its own layer or of the
// layers below it. This test reads every #include "..." of the library, the command line and the
// kernel templates and fails on one that crosses a layer upward, naming both files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/temp_dir.h"

namespace fs = std::filesystem;

namespace {

// Lowest first. The index is the layer's height.
const std::vector<std::string> kLayers = {"core", "emulation", "generator", "jit",   "cuda", "ring",
                                          "cache", "transport", "backend",  "tuner", "api",  "cli"};

int height(const std::string& layer) {
  for (size_t i = 0; i < kLayers.size(); ++i)
    if (kLayers[i] == layer) return static_cast<int>(i);
  return -1;
}

// The layer of a file given by its path from the repository root; "" when it belongs to none.
std::string layer_of(const std::string& path) {
  static const std::map<std::string, std::string> kPublic = {
      {"include/cpgen/cxx_abi.h", "core"},         {"include/cpgen/types.h", "core"},
      {"include/cpgen/error.h", "core"},
      {"include/cpgen/problem.h", "core"},         {"include/cpgen/config_source.h", "core"},
      {"include/cpgen/nccl_bootstrap.h", "transport"}, {"include/cpgen/nccl_mpi.h", "transport"},
      {"include/cpgen/ring_attention.h", "api"},   {"include/cpgen/cpgen_c.h", "api"}};
  if (auto it = kPublic.find(path); it != kPublic.end()) return it->second;
  auto under = [&](const std::string& dir) { return path.rfind(dir, 0) == 0; };
  if (under("templates/")) return "core";
  if (under("emulation/")) return "emulation";
  if (under("generator/")) return "generator";
  if (under("cache/")) return "cache";
  if (under("tuner/")) return "tuner";
  if (under("tools/cli/")) return "cli";
  if (under("runtime/")) {
    std::string rest = path.substr(std::string("runtime/").size());
    auto slash = rest.find('/');
    if (slash == std::string::npos) return "";  // a file straight under runtime/ has no layer
    std::string layer = rest.substr(0, slash);
    return height(layer) >= 0 ? layer : "";
  }
  return "";
}

// What a quoted include names, as a path from the repository root. A bare file name is a file
// of the including file's own folder (the emulator includes its header that way, so the same
// line works where the emulated backend writes both files next to each other).
std::string resolve(const std::string& included, const std::string& from_file) {
  if (included.find('/') == std::string::npos) {
    const auto slash = from_file.rfind('/');
    return slash == std::string::npos ? included : from_file.substr(0, slash + 1) + included;
  }
  if (included.rfind("cpgen/", 0) == 0) {
    std::string name = included.substr(6);
    if (name.size() > 4 && name.substr(name.size() - 4) == ".cuh") return "templates/" + name;
    return "include/" + included;
  }
  return included;
}

struct Violation {
  std::string file, included, why;
};

// Checks every .h/.cpp/.cuh/.inc under the layered folders of `root`.
std::vector<Violation> check_tree(const fs::path& root) {
  std::vector<Violation> out;
  const std::regex include_re(R"(^\s*#\s*include\s*\"([^\"]+)\")");
  for (const char* dir :
       {"include/cpgen", "templates", "emulation", "generator", "runtime", "cache", "tuner", "tools/cli"}) {
    if (!fs::exists(root / dir)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      if (!entry.is_regular_file()) continue;
      std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cpp" && ext != ".cuh" && ext != ".inc") continue;
      std::string rel = fs::relative(entry.path(), root).generic_string();
      std::string from = layer_of(rel);
      if (from.empty()) {
        out.push_back({rel, "", "the file is in no layer (see docs/design.md)"});
        continue;
      }
      std::ifstream in(entry.path());
      std::string line;
      while (std::getline(in, line)) {
        std::smatch m;
        if (!std::regex_search(line, m, include_re)) continue;
        std::string target = resolve(m[1].str(), rel);
        std::string to = layer_of(target);
        if (to.empty()) {
          out.push_back({rel, m[1].str(), "includes a file of no layer"});
        } else if (from == "emulation" && to != "emulation") {
          // The emulated backend compiles the emulator with nothing but its own embedded files.
          out.push_back({rel, m[1].str(), "the emulator includes only its own folder and standard headers"});
        } else if (height(to) > height(from)) {
          out.push_back({rel, m[1].str(), "layer " + from + " includes layer " + to + ", which is above it"});
        }
      }
    }
  }
  return out;
}

std::string describe(const std::vector<Violation>& v) {
  std::ostringstream s;
  for (const auto& x : v) s << x.file << ": " << (x.included.empty() ? "" : "\"" + x.included + "\": ") << x.why << "\n";
  return s.str();
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

}  // namespace

TEST(Layers, NoIncludeCrossesALayerUpward) {
  auto violations = check_tree(CPGEN_SOURCE_DIR);
  EXPECT_TRUE(violations.empty()) << describe(violations);
}

TEST(Layers, EveryLayerFolderExists) {
  for (const auto& layer : {"core", "jit", "cuda", "ring", "transport", "backend", "api"})
    EXPECT_TRUE(fs::is_directory(fs::path(CPGEN_SOURCE_DIR) / "runtime" / layer)) << layer;
}

// The checker itself: a tree with one upward include, one downward, and one stray file.
TEST(Layers, CheckerCatchesAnUpwardInclude) {
  cpgen::testing::TempDir dir("layers");
  fs::path root = dir.path();
  write(root / "runtime/ring/partition.h", "#include \"runtime/core/enum_names.h\"\n#include \"cpgen/problem.h\"\n");
  write(root / "runtime/core/enum_names.h", "#include \"runtime/api/kernel_select.h\"\n");
  write(root / "runtime/api/kernel_select.h", "#include \"cache/lookup.h\"\n#include \"cpgen/ring_attention.h\"\n");
  write(root / "cache/lookup.h", "#include \"runtime/backend/gpu_backend.h\"\n");
  write(root / "runtime/stray.h", "\n");
  write(root / "templates/step_fwd.cuh", "#include \"cpgen/params.cuh\"\n");
  write(root / "emulation/cuda_emulation.cpp",
        "#include \"cuda_emulation.h\"\n#include \"runtime/core/half_convert.h\"\n");
  write(root / "emulation/cuda_emulation.h", "\n");
  write(root / "runtime/backend/emulated_kernel.h", "#include \"emulation/emulated_launch.h\"\n");
  write(root / "emulation/emulated_launch.h", "\n");
  auto v = describe(check_tree(root));
  EXPECT_NE(v.find("runtime/core/enum_names.h: \"runtime/api/kernel_select.h\": layer core includes layer api"),
            std::string::npos) << v;
  EXPECT_NE(v.find("cache/lookup.h: \"runtime/backend/gpu_backend.h\": layer cache includes layer backend"),
            std::string::npos) << v;
  EXPECT_NE(v.find("runtime/stray.h: the file is in no layer"), std::string::npos) << v;
  EXPECT_EQ(v.find("partition.h"), std::string::npos) << v;
  EXPECT_EQ(v.find("kernel_select.h: \"cache"), std::string::npos) << v;
  EXPECT_EQ(v.find("step_fwd.cuh"), std::string::npos) << v;
  // The emulator's own header by its bare name is fine; anything else of the project is not.
  EXPECT_NE(v.find("emulation/cuda_emulation.cpp: \"runtime/core/half_convert.h\": the emulator includes only its own "
                   "folder"), std::string::npos) << v;
  EXPECT_EQ(v.find("\"cuda_emulation.h\""), std::string::npos) << v;
  EXPECT_EQ(v.find("emulated_kernel.h"), std::string::npos) << v;
}
