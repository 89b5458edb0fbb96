// README.md and docs/*.md point only at things a fresh clone has: every relative Markdown link
// resolves, and every repository path they name (in `code` spans and in indented command
// examples, starting with a top-level folder of the repository) exists.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "test_util.h"

namespace cpgen {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> documents() {
  const fs::path root = testing::source_dir();
  std::vector<fs::path> docs{root / "README.md"};
  for (const auto& entry : fs::directory_iterator(root / "docs"))
    if (entry.path().extension() == ".md") docs.push_back(entry.path());
  return docs;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const char* const kTopFolders[] = {"bench/", "cache/",   "caches/", "cmake/", "docs/",  "examples/",
                                   "generator/", "include/", "runtime/", "templates/", "tests/", "tools/",
                                   "tuner/"};

// A token that names a path in the repository, rather than a placeholder, a glob or a file the
// reader is told to create.
bool names_repo_path(const std::string& token) {
  if (token.find_first_of("<>*{}$|") != std::string::npos) return false;
  for (const char* top : kTopFolders)
    if (token.rfind(top, 0) == 0) return true;
  return false;
}

// Problems found in one document: links and paths that do not resolve.
std::vector<std::string> unresolved(const fs::path& doc) {
  const fs::path root = testing::source_dir();
  const std::string text = read(doc);
  std::vector<std::string> bad;
  // [text](target): relative to the document; external links and anchors are not checked here.
  static const std::regex link(R"(\]\(([^)\s#]+)(#[^)]*)?\))");
  for (std::sregex_iterator it(text.begin(), text.end(), link), end; it != end; ++it) {
    const std::string target = (*it)[1];
    if (target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0) continue;
    if (!fs::exists(doc.parent_path() / target)) bad.push_back("link " + target);
  }
  // `span`, possibly several words: each word that names a repository path.
  std::vector<std::string> tokens;
  static const std::regex span("`([^`\n]+)`");
  for (std::sregex_iterator it(text.begin(), text.end(), span), end; it != end; ++it) {
    std::istringstream words((*it)[1].str());
    for (std::string w; words >> w;) tokens.push_back(w);
  }
  // Indented command examples. The word after a redirection is a file the example writes; the
  // examples after it may use that file.
  std::set<std::string> written;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("    ", 0) != 0) continue;
    std::istringstream words(line);
    bool after_redirect = false;
    for (std::string w; words >> w;) {
      if (w == "#") break;
      if (after_redirect) written.insert(w); else tokens.push_back(w);
      after_redirect = w == ">" || w == ">>";
    }
  }
  for (std::string t : tokens) {
    while (!t.empty() && std::string(",.;:)'\"").find(t.back()) != std::string::npos) t.pop_back();
    if (names_repo_path(t) && !written.count(t) && !fs::exists(root / t)) bad.push_back("path " + t);
  }
  return bad;
}

TEST(DocsLinks, EveryRelativeLinkAndRepositoryPathResolves) {
  int checked = 0;
  for (const fs::path& doc : documents()) {
    for (const std::string& problem : unresolved(doc)) ADD_FAILURE() << doc << ": " << problem << " does not exist";
    ++checked;
  }
  EXPECT_GE(checked, 3) << "README.md, docs/design.md and docs/formats.md";
}

TEST(DocsLinks, NothingPointsOutsideTheRepository) {
  for (const fs::path& doc : documents()) {
    const std::string text = read(doc);
    EXPECT_EQ(text.find("](../"), std::string::npos) << doc << " links outside the repository";
    EXPECT_EQ(text.find("../shared/DESIGN.md"), std::string::npos) << doc;
  }
  EXPECT_EQ(read(fs::path(testing::source_dir()) / "README.md").find("../shared"), std::string::npos)
      << "README.md must not send readers to a folder beside the clone";
}

// The checker itself catches a missing path.
TEST(DocsLinks, CheckerReportsAMissingPath) {
  const fs::path doc = fs::temp_directory_path() / ("cpgen_links_" + std::to_string(::getpid()) + ".md");
  std::ofstream(doc) << "See `tools/no-such-script.sh` and [x](no-such.md); `tools/run.sh` exists.\n"
                        "\n    tools/run.sh plan --shapes examples/shapes/missing.json > caches/new.json\n";
  const auto bad = unresolved(doc);
  fs::remove(doc);
  EXPECT_EQ(bad, (std::vector<std::string>{"link no-such.md", "path tools/no-such-script.sh",
                                           "path examples/shapes/missing.json"}));
}

}  // namespace
}  // namespace cpgen
