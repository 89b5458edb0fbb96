// tools/templates-at.sh, which gives tools/gpu-check.sh --ab and tools/pack-gpu-deps.sh (AB_REV=)
// an earlier commit's templates, on a small repository of three commits made here: the templates
// of the project, then a change to params.cuh, then a change to softmax.cuh. A commit's templates
// come out whole and named (.rev); a folder already holding them is kept; one the script did not
// make is refused, not emptied; a commit whose params*.cuh differ from the tree's is refused
// before anything is written, and gpu-check refuses such an --ab before any phase; the repository
// is only read.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

namespace fs = std::filesystem;

using testing::slurp;

class TemplatesAt : public ::testing::Test {
 protected:
  void SetUp() override {
    if (sh("command -v git").code != 0) GTEST_SKIP() << "no git on PATH";
    fs::create_directories(repo() + "/tools");
    for (const char* script : {"templates-at.sh", "gpu-check.sh"})
      fs::copy_file(std::string(CPGEN_SOURCE_DIR) + "/tools/" + script, repo() + "/tools/" + script);
    fs::copy(std::string(CPGEN_SOURCE_DIR) + "/templates", repo() + "/templates", fs::copy_options::recursive);
    commit("templates");
    std::ofstream(repo() + "/templates/params.cuh", std::ios::app) << "// a field moved\n";
    commit("params");
    std::ofstream(repo() + "/templates/softmax.cuh", std::ios::app) << "// a faster loop\n";
    commit("softmax");
  }

  testing::ShellResult sh(const std::string& command) {
    return testing::run_shell("cd '" + repo() + "' 2>/dev/null; " + command, dir_.path() + "/log.txt");
  }
  void commit(const std::string& message) {
    const auto r = sh("{ [ -d .git ] || git init -q; } && git add -A && git -c user.name=t -c user.email=t@t commit -q -m '" +
                      message + "'");
    ASSERT_EQ(r.code, 0) << r.output;
  }
  std::string rev(const std::string& name) {
    const auto r = sh("git rev-parse " + name);
    return r.output;  // with its newline, as .rev holds it
  }
  testing::ShellResult at(const std::string& rev_name, const std::string& dir) {
    return sh("tools/templates-at.sh '" + rev_name + "' '" + dir + "'");
  }
  std::string repo() const { return dir_.path() + "/repo"; }
  std::string out(const std::string& name) const { return dir_.path() + "/" + name; }

  testing::TempDir dir_{"templates_at"};
};

TEST_F(TemplatesAt, WritesTheCommitsTemplatesAndKeepsThemForTheSameCommit) {
  const std::string dir = out("ab");
  const auto r = at("HEAD~1", dir);  // params as the tree's, softmax before its change
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, dir + "\n");
  EXPECT_EQ(slurp(dir + "/.rev"), rev("HEAD~1"));
  EXPECT_EQ(slurp(dir + "/params.cuh"), slurp(repo() + "/templates/params.cuh"));
  const std::string softmax = slurp(dir + "/softmax.cuh");
  EXPECT_EQ(softmax, slurp(std::string(CPGEN_SOURCE_DIR) + "/templates/softmax.cuh"));
  EXPECT_EQ(softmax.find("a faster loop"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir + "/step_fwd_wgmma.cuh"));

  std::ofstream(dir + "/mark") << "kept";
  ASSERT_EQ(at("HEAD~1", dir).code, 0);
  EXPECT_TRUE(fs::exists(dir + "/mark")) << "the same commit's folder is kept as it is";
  const auto head = at("HEAD", dir);
  ASSERT_EQ(head.code, 0) << head.output;
  EXPECT_FALSE(fs::exists(dir + "/mark")) << "another commit's folder is made anew";
  EXPECT_EQ(slurp(dir + "/.rev"), rev("HEAD"));
  EXPECT_NE(slurp(dir + "/softmax.cuh").find("a faster loop"), std::string::npos);
  EXPECT_EQ(sh("git status --porcelain").output, "") << "the repository is only read";
}

TEST_F(TemplatesAt, ACommitWhoseParametersDifferIsRefusedAndNothingIsWritten) {
  const auto r = at("HEAD~2", out("ab"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "templates-at: 'HEAD~2': its templates/params.cuh differs from this tree's, whose layout the host passes "
            "its kernels (the A/B needs the same parameters)\n");
  EXPECT_FALSE(fs::exists(out("ab")));
  // A change in the working tree counts too: the host is built from it.
  std::ofstream(repo() + "/templates/params_wgmma.cuh", std::ios::app) << "// uncommitted\n";
  const auto dirty = at("HEAD", out("ab"));
  EXPECT_EQ(dirty.code, 2);
  EXPECT_NE(dirty.output.find("its templates/params_wgmma.cuh differs"), std::string::npos) << dirty.output;
  EXPECT_FALSE(fs::exists(out("ab")));
}

TEST_F(TemplatesAt, BadInputIsOneLineAndAForeignFolderIsLeftAlone) {
  const auto none = at("no-such-commit", out("ab"));
  EXPECT_EQ(none.code, 2);
  EXPECT_EQ(none.output, "templates-at: 'no-such-commit': not a commit of this checkout, nor a packed copy in " + repo() +
                             "/.gpudeps/templates-ab\n");
  const auto usage = sh("tools/templates-at.sh HEAD");
  EXPECT_EQ(usage.code, 2);
  EXPECT_EQ(usage.output, "templates-at: usage: tools/templates-at.sh REV DIR\n");

  const std::string foreign = out("mine");
  fs::create_directories(foreign);
  std::ofstream(foreign + "/notes.txt") << "mine";
  const auto r = at("HEAD", foreign);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output, "templates-at: '" + foreign +
                          "' holds files this script did not write (no .rev): give an empty or new folder\n");
  EXPECT_EQ(slurp(foreign + "/notes.txt"), "mine");
  const auto file = at("HEAD", foreign + "/notes.txt");
  EXPECT_EQ(file.code, 2);
  EXPECT_EQ(file.output, "templates-at: '" + foreign + "/notes.txt' is not a folder\n");
  EXPECT_EQ(slurp(foreign + "/notes.txt"), "mine");
}

// A copy of the tree without its git history (as a device machine may get) finds an --ab commit's
// templates in the pack (.gpudeps/templates-ab/<commit>, tools/pack-gpu-deps.sh AB_REV=): by a
// unique prefix, with the same parameter check, and gpu-check --ab takes it.
TEST_F(TemplatesAt, WithoutGitHistoryThePackedCopyStandsIn) {
  const std::string full = rev("HEAD~1").substr(0, 40);
  ASSERT_EQ(at("HEAD~1", out("from-git")).code, 0);
  const std::string copy = out("copy");
  fs::create_directories(copy + "/.gpudeps/templates-ab");
  for (const char* sub : {"tools", "templates"}) fs::copy(repo() + "/" + sub, copy + "/" + sub, fs::copy_options::recursive);
  fs::copy(out("from-git"), copy + "/.gpudeps/templates-ab/" + full, fs::copy_options::recursive);
  const auto in_copy = [&](const std::string& command) {
    return testing::run_shell("cd '" + copy + "' && " + command, dir_.path() + "/log.txt");
  };
  ASSERT_NE(in_copy("git rev-parse --verify -q HEAD").code, 0) << "the copy must have no history";

  const auto resolved = in_copy("tools/templates-at.sh --resolve " + full.substr(0, 7));
  ASSERT_EQ(resolved.code, 0) << resolved.output;
  EXPECT_EQ(resolved.output, full + "\n");
  const auto r = in_copy("tools/templates-at.sh " + full.substr(0, 7) + " '" + out("from-pack") + "'");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(slurp(out("from-pack") + "/softmax.cuh"), slurp(out("from-git") + "/softmax.cuh"));
  EXPECT_EQ(slurp(out("from-pack") + "/.rev"), full + "\n");

  const auto missing = in_copy("tools/templates-at.sh abcdef0 '" + out("none") + "'");
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(missing.output, "templates-at: 'abcdef0': not a commit of this checkout, nor a packed copy in " + copy +
                                "/.gpudeps/templates-ab\n");
  EXPECT_FALSE(fs::exists(out("none")));

  // gpu-check --ab in the copy (no GPU: a stand-in nvidia-smi that finds none).
  fs::create_directories(out("bin"));
  std::ofstream(out("bin") + "/nvidia-smi") << "#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n";
  fs::permissions(out("bin") + "/nvidia-smi", fs::perms::owner_all);
  const auto check = in_copy("PATH='" + out("bin") + "':\"$PATH\" tools/gpu-check.sh --build-dir '" + out("build") +
                             "' --report '" + out("report.md") + "' --only wgmma --ab " + full.substr(0, 7));
  ASSERT_EQ(check.code, 0) << check.output;
  EXPECT_EQ(slurp(out("build") + "/templates-ab/1/.rev"), full + "\n");

  // The packed copy's parameters are checked as git's are.
  std::ofstream(copy + "/.gpudeps/templates-ab/" + full + "/params.cuh", std::ios::app) << "// a field moved\n";
  const auto differs = in_copy("tools/templates-at.sh " + full + " '" + out("differs") + "'");
  EXPECT_EQ(differs.code, 2);
  EXPECT_NE(differs.output.find("its templates/params.cuh differs from this tree's"), std::string::npos) << differs.output;
  EXPECT_FALSE(fs::exists(out("differs")));
}

// gpu-check --ab takes a list; every commit of it is checked before the first phase, so a call
// does not spend its device minutes and then find the A/B impossible. Without a GPU (a stand-in
// nvidia-smi that finds none) the phases then say so, and each commit's templates are in place.
TEST_F(TemplatesAt, GpuCheckRefusesAnAbListWithACommitOfOtherParametersBeforeAnyPhase) {
  fs::create_directories(out("bin"));
  std::ofstream(out("bin") + "/nvidia-smi") << "#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n";
  fs::permissions(out("bin") + "/nvidia-smi", fs::perms::owner_all);
  const std::string check = "PATH='" + out("bin") + "':\"$PATH\" tools/gpu-check.sh --build-dir '" + out("build") +
                            "' --report '" + out("report.md") + "' --only wgmma --ab ";
  const auto refused = sh(check + "HEAD~1,HEAD~2");
  EXPECT_EQ(refused.code, 2);
  EXPECT_EQ(refused.output,
            "gpu-check: --ab: 'HEAD~2': its templates/params.cuh differs from this tree's, whose layout the host "
            "passes its kernels (the A/B needs the same parameters) (see --help)\n");
  EXPECT_FALSE(fs::exists(out("report.md")));

  const auto ok = sh(check + "HEAD~1,HEAD");
  ASSERT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(slurp(out("report.md")).find("| wgmma | not run: no GPU"), std::string::npos) << slurp(out("report.md"));
  EXPECT_EQ(slurp(out("build") + "/templates-ab/1/.rev"), rev("HEAD~1"));
  EXPECT_EQ(slurp(out("build") + "/templates-ab/2/.rev"), rev("HEAD"));
  EXPECT_EQ(sh("git status --porcelain").output, "") << "the repository is only read";
}

}  // namespace
}  // namespace cpgen
