// `cpgen compile` end to end through the built binary, with temporary kernel stores.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "generator/kernel_spec.h"
#include "generator/kernel_spec_wgmma.h"
#include "generator/render.h"
#include "generator/template_files.h"
#include "runtime/jit/kernel_store.h"
#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

using testing::line_count;
using testing::run_cli;
using testing::slurp;
using testing::ScopedEnv;
using testing::TempDir;

// The flagship config (must not spill) and a cheaper one for tests that only need some kernel.
const std::string kUri = "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2";
const std::string kSmallUri = "ring_fwd_fp16_hd64_full_gqa1_bm64_bn64_w4_s2";

TEST(CliCompile, HelpExitsZero) {
  auto root = run_cli("--help");
  EXPECT_EQ(root.exit_code, 0) << root.err;
  EXPECT_NE(root.out.find("compile"), std::string::npos) << root.out;
  auto help = run_cli("compile --help");
  EXPECT_EQ(help.exit_code, 0) << help.err;
  for (const char* option :
       {"--spec", "--all", "--arch", "--emit-source", "--emit-cubin", "--emit-ptx", "--json", "--store", "--jobs"})
    EXPECT_NE(help.out.find(option), std::string::npos) << option << " missing from:\n" << help.out;
}

// Every command's --arch help names every arch validate_arch accepts (tune and explain named three
// of the seven).
TEST(CliCompile, EveryArchHelpListsEverySupportedArch) {
  for (const char* command : {"compile", "tune", "explain"}) {
    auto help = run_cli(std::string(command) + " --help");
    ASSERT_EQ(help.exit_code, 0) << help.err;
    EXPECT_NE(help.out.find("sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100, sm_120"), std::string::npos)
        << command << " --help:\n" << help.out;
  }
  EXPECT_EQ(supported_archs_text(), "sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100, sm_120");
}

TEST(CliCompile, SpecJsonReportsResourcesAndTheSecondRunComesFromTheStore) {
  TempDir store("cli");
  auto first = run_cli("compile --spec " + kUri + " --arch sm_90a --json --store " + store.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto j = nlohmann::json::parse(first.out);
  for (const char* key : {"uri", "arch", "registers", "spill_bytes", "stack_bytes", "shared_bytes",
                          "cubin_bytes", "compile_ms", "from_store"})
    EXPECT_TRUE(j.contains(key)) << key << " missing from " << first.out;
  EXPECT_EQ(j["uri"], kUri);
  EXPECT_EQ(j["arch"], "sm_90a");
  EXPECT_EQ(j["spill_bytes"], 0) << kUri << " spills";
  EXPECT_GT(j["registers"].get<int>(), 0);
  EXPECT_GT(j["cubin_bytes"].get<int>(), 0);
  EXPECT_EQ(j["from_store"], false);

  auto second = run_cli("compile --spec " + kUri + " --arch sm_90a --json --repeat 3 --store " + store.path());
  ASSERT_EQ(second.exit_code, 0) << second.err;
  auto k = nlohmann::json::parse(second.out);
  EXPECT_EQ(k["from_store"], true);
  EXPECT_EQ(k["key"], j["key"]);
  EXPECT_EQ(k["registers"], j["registers"]);
  EXPECT_EQ(k["cubin_bytes"], j["cubin_bytes"]);
  EXPECT_EQ(k["repeat"]["count"], 2);
  EXPECT_EQ(k["repeat"]["from_store"], true);
}

// What can never be a store is refused up front, with the reason: a --store that is a link to a
// missing folder (every write failed behind it, and compile said nothing), or $CPGEN_KERNEL_DIR
// naming a file.
TEST(CliCompile, AStoreThatCanNeverBeOneIsBadInput) {
  TempDir dir("cli");
  const std::string link = dir.path() + "/link";
  std::filesystem::create_symlink(dir.path() + "/missing", link);
  auto dangling = run_cli("compile --spec " + kSmallUri + " --arch sm_80 --store " + link);
  EXPECT_EQ(dangling.exit_code, 2) << dangling.err;
  EXPECT_NE(dangling.err.find("is a link to a missing folder"), std::string::npos) << dangling.err;
  EXPECT_EQ(line_count(dangling.err), 1) << dangling.err;
  const std::string file = dir.path() + "/file";
  std::ofstream(file) << "x";
  ScopedEnv env("CPGEN_KERNEL_DIR", file.c_str());
  auto not_a_folder = run_cli("compile --spec " + kSmallUri + " --arch sm_80");
  EXPECT_EQ(not_a_folder.exit_code, 2) << not_a_folder.err;
  EXPECT_NE(not_a_folder.err.find("is not a directory"), std::string::npos) << not_a_folder.err;
}

// A compile the store could not keep fails the command (exit 1) with one line naming the store
// and why, after its report; it exited 0 saying nothing. Here the entry's name is taken by a
// folder, so the store's rename fails.
TEST(CliCompile, ACompileTheStoreCouldNotKeepExitsOne) {
  TempDir dir("cli");
  auto probe = run_cli("compile --spec " + kSmallUri + " --arch sm_80 --no-store --json");
  ASSERT_EQ(probe.exit_code, 0) << probe.err;
  const std::string key = nlohmann::json::parse(probe.out).at("key").get<std::string>();
  const std::string store = dir.path() + "/store";
  std::filesystem::create_directories(store + "/" + key + ".cpgenk/taken");
  auto r = run_cli("compile --spec " + kSmallUri + " --arch sm_80 --store " + store);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("registers"), std::string::npos) << "the report still comes: " << r.out;
  EXPECT_NE(r.err.find("1 of 1 compiled kernel(s) could not be kept in the store (directory " + store + ")"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  // --defaults (whose purpose is filling a store) likewise, here for the hd64 causal default.
  const std::string default_uri = "ring_fwd_bf16_hd64_causal_gqa1_bm128_bn64_w4_s2";
  auto default_probe = run_cli("compile --spec " + default_uri + " --arch sm_80 --no-store --json");
  ASSERT_EQ(default_probe.exit_code, 0) << default_probe.err;
  std::filesystem::create_directories(store + "/" + nlohmann::json::parse(default_probe.out).at("key").get<std::string>() +
                                      ".cpgenk/taken");
  auto all = run_cli("compile --defaults --filter " + default_uri + " --arch sm_80 --store " + store);
  EXPECT_EQ(all.exit_code, 1) << all.err;
  EXPECT_NE(all.err.find("1 of 1 compiled kernel(s) could not be kept in the store"), std::string::npos) << all.err;
}

// Under a file-size limit smaller than the entry, the store's write fails and is reported (exit 1,
// no temporary file left); SIGXFSZ killed the process before (exit 153).
TEST(CliCompile, AFileSizeLimitIsAStoreErrorNotASignal) {
  TempDir dir("cli");
  const std::string store = dir.path() + "/store";
  const std::string cmd = "ulimit -f 16; exec " + std::string(CPGEN_CLI_PATH) + " compile --spec " + kSmallUri +
                          " --arch sm_80 --store " + store + " >/dev/null 2>" + dir.path() + "/err";
  const int status = std::system(("sh -c '" + cmd + "'").c_str());
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string err = slurp(dir.path() + "/err");
  EXPECT_NE(err.find("could not be kept in the store"), std::string::npos) << err;
  for (const auto& entry : std::filesystem::directory_iterator(store))
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
}

// The generated source with the templates it includes inlined: one file, with no include of
// cpgen's headers left (they are built into cpgen, not installed), which nvcc compiles where the
// machine has one (it wrote the bare source, a line including cpgen/step_fwd.cuh).
TEST(CliCompile, EmitSourceWritesTheGeneratedSource) {
  TempDir dir("cli");
  const std::string file = dir.path() + "/kernel.cu";
  auto r = run_cli("compile --spec " + kSmallUri + " --arch sm_80 --store " + dir.path() + "/store --emit-source " + file);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string source = slurp(file);
  EXPECT_EQ(source, flatten_includes(render_source(KernelSpec::parse(kSmallUri)), template_files()));
  for (std::string_view name : include_names(source)) EXPECT_FALSE(name.starts_with("cpgen/")) << name;
  EXPECT_NE(source.find("extern \"C\" __global__"), std::string::npos);
  EXPECT_NE(r.out.find("spill_bytes"), std::string::npos) << r.out;
  const std::string nvcc = std::filesystem::exists("/usr/local/cuda/bin/nvcc") ? "/usr/local/cuda/bin/nvcc" : "";
  if (!nvcc.empty()) {
    const auto built = testing::run_shell(nvcc + " -cubin -arch=sm_80 -std=c++17 -o " + dir.path() + "/k.cubin " + file,
                                          dir.path() + "/nvcc.log");
    EXPECT_EQ(built.code, 0) << built.output;
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/k.cubin"));
  }
}

// An --emit option outside --spec, and `earlier` (an --emit option listed before it in the
// command's check) naming the same file, are each refused in one line with exit 2.
void expect_emit_misuse_refused(const std::string& option, const std::string& earlier, const std::string& file) {
  auto all = run_cli("compile --all --filter hd64 --no-store " + option + " " + file);
  EXPECT_EQ(all.exit_code, 2);
  EXPECT_EQ(line_count(all.err), 1) << all.err;
  auto same = run_cli("compile --spec " + kSmallUri + " --no-store " + earlier + " " + file + " " + option + " " + file);
  EXPECT_EQ(same.exit_code, 2);
  EXPECT_NE(same.err.find(earlier + " and " + option + " name the same file"), std::string::npos) << same.err;
  EXPECT_EQ(line_count(same.err), 1) << same.err;
  // The same file spelled another way (a "./" inside the path): compared as files, not strings.
  const std::filesystem::path f(file);
  const std::string respelled = (f.parent_path() / "." / f.filename()).string();
  auto alias = run_cli("compile --spec " + kSmallUri + " --no-store " + earlier + " " + file + " " + option + " " + respelled);
  EXPECT_EQ(alias.exit_code, 2) << alias.err;
  EXPECT_NE(alias.err.find("name the same file"), std::string::npos) << alias.err;
  // A folder in place of the file, refused before the compile with the reason.
  auto folder = run_cli("compile --spec " + kSmallUri + " --no-store " + option + " " + f.parent_path().string());
  EXPECT_EQ(folder.exit_code, 2) << folder.err;
  EXPECT_NE(folder.err.find("is a directory"), std::string::npos) << folder.err;
  EXPECT_EQ(line_count(folder.err), 1) << folder.err;
}

// The PTX that ptxas compiled, beside the cubin: also for a kernel the store serves (it keeps
// cubins only, so compile runs NVRTC once more), the same text both times; one kernel only, and
// never over another file the same command writes.
TEST(CliCompile, EmitPtxWritesWhatNvrtcGavePtxasEvenFromTheStore) {
  TempDir dir("cli");
  const std::string store = dir.path() + "/store", first = dir.path() + "/first.ptx",
                    second = dir.path() + "/second.ptx";
  auto fresh = run_cli("compile --spec " + kSmallUri + " --arch sm_90 --store " + store + " --emit-ptx " + first);
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_NE(fresh.out.find("ptx           " + first), std::string::npos) << fresh.out;
  const std::string ptx = slurp(first);
  EXPECT_NE(ptx.find(".target sm_90"), std::string::npos) << ptx.substr(0, 400);
  EXPECT_NE(ptx.find(".entry " + kSmallUri), std::string::npos) << ptx.substr(0, 400);
  EXPECT_NE(ptx.find("mma.sync"), std::string::npos);
  EXPECT_EQ(ptx.find('\0'), std::string::npos) << "no terminating NUL in the file";

  auto stored = run_cli("compile --spec " + kSmallUri + " --arch sm_90 --store " + store + " --json --emit-ptx " + second);
  ASSERT_EQ(stored.exit_code, 0) << stored.err;
  EXPECT_NE(stored.out.find("\"from_store\": true"), std::string::npos) << stored.out;
  EXPECT_EQ(slurp(second), ptx);

  expect_emit_misuse_refused("--emit-ptx", "--emit-cubin", first);
  EXPECT_EQ(slurp(first), ptx) << "a refused command wrote nothing";
}

// The cubin as the store holds it, for cuobjdump -sass; one kernel only, and never over the
// source file.
TEST(CliCompile, EmitCubinWritesTheCompiledKernel) {
  TempDir dir("cli");
  const std::string cubin = dir.path() + "/kernel.cubin";
  auto r = run_cli("compile --spec " + kSmallUri + " --arch sm_90 --store " + dir.path() + "/store --emit-cubin " + cubin);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string bytes = slurp(cubin);
  ASSERT_GT(bytes.size(), 1000u);
  EXPECT_EQ(bytes.compare(0, 4, "\x7f" "ELF"), 0);
  EXPECT_NE(r.out.find("cubin         " + cubin), std::string::npos) << r.out;
  expect_emit_misuse_refused("--emit-cubin", "--emit-source", cubin);
}

TEST(CliCompile, BadHeadDimExitsTwoWithOneLineNamingTheField) {
  auto r = run_cli("compile --spec ring_fwd_bf16_hd100_causal_gqa4_bm128_bn64_w4_s2 --no-store");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("head_dim"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("64, 96, 128, 256"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliCompile, BadArchAndMissingSpecExitTwo) {
  auto arch = run_cli("compile --spec " + kUri + " --arch sm_75 --no-store");
  EXPECT_EQ(arch.exit_code, 2);
  EXPECT_EQ(line_count(arch.err), 1) << arch.err;
  EXPECT_NE(arch.err.find("sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100, sm_120"), std::string::npos) << arch.err;
  auto neither = run_cli("compile --no-store");
  EXPECT_EQ(neither.exit_code, 2);
  EXPECT_NE(neither.err.find("--spec"), std::string::npos) << neither.err;
}

// The user named a kernel the arch cannot run: bad input, one line naming the limit (it exited 1,
// as an internal failure would), and nothing is written, --emit-source's file included (it was
// written before the check).
TEST(CliCompile, InfeasibleSpecExitsTwoNamingTheLimitAndWritesNothing) {
  TempDir dir("cli");
  const std::string source = dir.path() + "/keep.cu";
  std::ofstream(source) << "the user's own file\n";
  auto r = run_cli("compile --spec ring_fwd_bf16_hd256_causal_gqa1_bm256_bn128_w4_s4 --arch sm_90 --no-store --emit-source " +
                   source);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("ring_fwd_bf16_hd256_causal_gqa1_bm256_bn128_w4_s4 on sm_90: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("shared memory"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(source), "the user's own file\n");
}

// --emit-source into the templates folder a compile reads (CPGEN_TEMPLATES_DIR) is refused: it
// replaced the template it then compiled.
TEST(CliCompile, EmitSourceNeverWritesOverATemplateItReads) {
  TempDir dir("cli");
  const std::string templates = dir.path() + "/templates";
  std::filesystem::create_directories(templates);
  for (const auto& entry : std::filesystem::directory_iterator(std::string(CPGEN_SOURCE_DIR) + "/templates"))
    std::filesystem::copy_file(entry.path(), templates + "/" + entry.path().filename().string());
  const std::string target = templates + "/step_bwd_pre.cuh";
  const std::string before = slurp(target);
  ScopedEnv env("CPGEN_TEMPLATES_DIR", templates.c_str());
  auto r = run_cli("compile --spec ring_bwd_pre_bf16_hd128_w4 --arch sm_80 --no-store --emit-source " + target);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("is in the templates folder " + templates), std::string::npos) << r.err;
  EXPECT_EQ(slurp(target), before);
}

TEST(CliCompile, FourConcurrentProcessesShareOneEmptyStore) {
  TempDir dir("cli");
  const std::string store = dir.path() + "/store";
  std::string script;
  for (int i = 0; i < 4; ++i) {
    script += std::string(CPGEN_CLI_PATH) + " compile --spec " + kSmallUri + " --arch sm_90 --json --store " +
              store + " >" + dir.path() + "/out" + std::to_string(i) + " 2>&1 & p" + std::to_string(i) + "=$!; ";
  }
  script += "s=0; for p in $p0 $p1 $p2 $p3; do wait $p || s=1; done; exit $s";
  const std::string command = "sh -c '" + script + "'";
  int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a process failed";

  std::set<std::string> keys;
  for (int i = 0; i < 4; ++i) {
    const std::string text = slurp(dir.path() + "/out" + std::to_string(i));
    auto j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_TRUE(j.is_object()) << "process " << i << " printed: " << text;
    EXPECT_GE(j["spill_bytes"].get<int>(), 0);
    keys.insert(j["key"].get<std::string>());
  }
  ASSERT_EQ(keys.size(), 1u);
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(store)) files.push_back(e.path().filename().string());
  ASSERT_EQ(files, std::vector<std::string>{*keys.begin() + ".cpgenk"}) << "leftover or extra files";
  DirectoryKernelStore reader(store);
  auto entry = reader.get(*keys.begin());
  ASSERT_TRUE(entry.has_value()) << "the one entry is not valid";
  EXPECT_EQ(entry->uri, kSmallUri);
}

TEST(CliCompile, AllWithFilterReportsEveryCandidateAndPrunesInfeasibleOnes) {
  TempDir store("cli");
  const std::string filter = "ring_fwd_bf16_hd256_causal_gqa1_";
  auto r = run_cli("compile --all --filter " + filter + " --arch sm_80 --json --jobs 2 --store " + store.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  auto candidates = KernelSpec::candidates_for(Dtype::kBf16, 256, true, 1);
  ASSERT_EQ(j["kernels"].size(), candidates.size());
  size_t infeasible = 0, ok = 0;
  for (const auto& entry : j["kernels"]) {
    KernelSpec spec = KernelSpec::parse(entry["uri"].get<std::string>());
    const bool feasible = check_feasibility(spec, "sm_80").feasible;
    const std::string status = entry["status"];
    if (feasible) {
      EXPECT_EQ(status, "ok") << entry.dump();
      EXPECT_GE(entry["spill_bytes"].get<int>(), 0) << entry.dump();
      ++ok;
    } else {
      EXPECT_EQ(status, "infeasible") << entry.dump();
      ++infeasible;
    }
  }
  EXPECT_GT(infeasible, 0u) << "head dim 256 on sm_80 should rule out some tiles";
  EXPECT_EQ(j["summary"]["compiled"], ok);
  EXPECT_EQ(j["summary"]["infeasible"], infeasible);
  EXPECT_EQ(j["summary"]["failed"], 0);
  EXPECT_EQ(j["summary"]["total"], candidates.size());
  EXPECT_NE(r.err.find(std::to_string(candidates.size()) + "/" + std::to_string(candidates.size())),
            std::string::npos) << "no progress line: " << r.err;

  auto again = run_cli("compile --all --filter " + filter + " --arch sm_80 --store " + store.path());
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("compiled 0, cached " + std::to_string(ok)), std::string::npos) << again.out;
}

// The URIs of a `compile --all --json` report, each expected compiled ("ok") without spills.
std::set<std::string> compiled_without_spills(const nlohmann::json& report) {
  std::set<std::string> uris;
  for (const auto& entry : report["kernels"]) {
    uris.insert(entry["uri"].get<std::string>());
    EXPECT_EQ(entry["status"], "ok") << entry.dump();
    EXPECT_EQ(entry["spill_bytes"], 0) << entry.dump();
  }
  return uris;
}

// On sm_90a `--all` adds the wgmma family's defaults, their ping-pong and their persistent variants (issue 13:
// every supported combination compiles for sm_90a without spills); elsewhere it has none. One slice (fp16, head dim 96, full,
// every group) here; CPGEN_FULL_COMPILE_MATRIX=1 (tools/gpu-check.sh --full-matrix sets it) compiles all.
TEST(CliCompile, AllOnSm90aCompilesTheWgmmaDefaultsWithoutSpills) {
  TempDir store("cli");
  const bool full = testing::full_compile_matrix();
  const std::string filter = full ? "ring_fwd_wgmma_" : "ring_fwd_wgmma_fp16_hd96_full_";
  auto r = run_cli("compile --all --filter " + filter + " --arch sm_90a --json --jobs 2 --store " + store.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const std::set<std::string> uris = compiled_without_spills(j);
  std::set<std::string> want;
  for (KernelSpec s : wgmma_defaults()) {
    if (s.uri().find(filter) != 0) continue;
    want.insert(s.uri());
    s.pingpong = true;
    want.insert(s.uri());
    s.pingpong = false;
    s.persistent = true;
    want.insert(s.uri());
  }
  EXPECT_EQ(uris, want);
  EXPECT_EQ(want.size(), full ? 240u : 15u);  // 2 dtypes x 4 head dims x 2 masks x 5 groups, x 3 variants

  auto none = run_cli("compile --all --filter ring_fwd_wgmma_ --arch sm_90 --store " + store.path());
  EXPECT_EQ(none.exit_code, 2) << "sm_90 has no wgmma kernels";
  EXPECT_NE(none.err.find("matches no candidate"), std::string::npos) << none.err;
}

// `--all` also covers the backward kinds: the step kernel's candidates of every combination and
// one preprocessing and one conversion kernel per dtype and head dim, each under its own URI.
TEST(CliCompile, AllCoversTheBackwardKinds) {
  TempDir store("cli");
  auto pre = run_cli("compile --all --filter ring_bwd_pre_ --arch sm_90 --json --jobs 2 --store " + store.path());
  ASSERT_EQ(pre.exit_code, 0) << pre.err;
  auto j = nlohmann::json::parse(pre.out);
  const std::set<std::string> uris = compiled_without_spills(j);
  std::set<std::string> want;
  for (Dtype dtype : kSupportedDtypes)
    for (int hd : kSupportedHeadDims) want.insert(KernelSpec::backward_pre(dtype, hd).uri());
  EXPECT_EQ(uris, want);

  // The final conversion kernels compile under NVRTC too, without spills.
  auto cvt = run_cli("compile --all --filter ring_bwd_cvt_ --arch sm_90 --json --jobs 2 --store " + store.path());
  ASSERT_EQ(cvt.exit_code, 0) << cvt.err;
  const std::set<std::string> cvt_uris = compiled_without_spills(nlohmann::json::parse(cvt.out));
  std::set<std::string> want_cvt;
  for (Dtype dtype : kSupportedDtypes)
    for (int hd : kSupportedHeadDims) want_cvt.insert(KernelSpec::backward_convert(dtype, hd).uri());
  EXPECT_EQ(cvt_uris, want_cvt);

  const std::string filter = "ring_bwd_fp16_hd64_full_gqa1_";
  auto step = run_cli("compile --all --filter " + filter + " --arch sm_90 --json --jobs 2 --store " + store.path());
  ASSERT_EQ(step.exit_code, 0) << step.err;
  auto k = nlohmann::json::parse(step.out);
  std::set<std::string> candidates;
  for (const KernelSpec& s : KernelSpec::backward_candidates_for(Dtype::kFp16, 64, false, 1)) candidates.insert(s.uri());
  EXPECT_EQ(k["kernels"].size(), candidates.size());
  for (const auto& entry : k["kernels"]) {
    EXPECT_EQ(candidates.count(entry["uri"].get<std::string>()), 1u) << entry.dump();
    EXPECT_NE(entry["status"], "failed") << entry.dump();
  }
  EXPECT_EQ(k["summary"]["failed"], 0);
}

// `--defaults` fills a store with what a runtime without a tuning database loads: the forward and
// backward default of each combination (one slice, head dim 64 full GQA 1 in both dtypes, here),
// not their candidates; a second run reads them all from the store. Bad combinations of the modes
// are one line each.
TEST(CliCompile, DefaultsCompilesEachCombinationsDefaultsOnceIntoTheStore) {
  TempDir store("cli");
  const std::string filter = "_hd64_full_gqa1_";
  auto r = run_cli("compile --defaults --filter " + filter + " --arch sm_90 --json --jobs 2 --store " + store.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> want;
  for (Dtype dtype : kSupportedDtypes) {
    want.insert(KernelSpec::default_for_arch(dtype, 64, false, 1, "sm_90").uri());
    want.insert(KernelSpec::backward_default_for_arch(dtype, 64, false, 1, "sm_90").uri());
  }
  EXPECT_EQ(compiled_without_spills(nlohmann::json::parse(r.out)), want);
  EXPECT_NE(r.err.find("compile --defaults: 4/4"), std::string::npos) << r.err;

  auto again = run_cli("compile --defaults --filter " + filter + " --arch sm_90 --store " + store.path());
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("4 kernels for sm_90: compiled 0, cached 4"), std::string::npos) << again.out;

  const std::vector<std::string> refused_modes = {"--defaults --all", "--defaults --spec " + kSmallUri,
                                                  "--defaults --repeat 2", "--defaults --filter no_such_kernel"};
  for (const std::string& bad : refused_modes) {
    auto refused = run_cli("compile " + bad + " --arch sm_90 --store " + store.path());
    EXPECT_EQ(refused.exit_code, 2) << bad;
    EXPECT_EQ(line_count(refused.err), 1) << bad << ": " << refused.err;
  }
}

// `--masks` adds each step kernel's mask variants (_ivl, _cap, _ivl_cap), which masked problems
// load: here the forward and backward defaults of bf16 head dim 64 full GQA 1 in each variant
// (each filter names one variant: "full_cap" is not in an _ivl_cap URI; without --masks the
// filter matches no default).
TEST(CliCompile, MasksAddEachStepKernelsMaskVariants) {
  TempDir store("cli");
  for (const auto& [intervals, softcap] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
    const std::string variant = std::string(intervals ? "_ivl" : "") + (softcap ? "_cap" : "");
    const std::string filter = "bf16_hd64_full" + variant + "_gqa1_";
    auto r = run_cli("compile --defaults --masks --filter " + filter + " --arch sm_90 --json --jobs 2 --store " +
                     store.path());
    ASSERT_EQ(r.exit_code, 0) << variant << ": " << r.err;
    std::set<std::string> want;
    for (KernelSpec s : {KernelSpec::default_for_arch(Dtype::kBf16, 64, false, 1, "sm_90"),
                         KernelSpec::backward_default_for_arch(Dtype::kBf16, 64, false, 1, "sm_90")}) {
      s.key_intervals = intervals;
      s.softcap = softcap;
      want.insert(s.uri());
    }
    EXPECT_EQ(compiled_without_spills(nlohmann::json::parse(r.out)), want) << variant;
  }

  const std::string filter = "bf16_hd64_full_ivl_cap_gqa1_";
  auto without = run_cli("compile --defaults --filter " + filter + " --arch sm_90 --store " + store.path());
  EXPECT_EQ(without.exit_code, 2) << without.err;
  EXPECT_NE(without.err.find("matches no default"), std::string::npos) << without.err;
  auto with_spec = run_cli("compile --masks --spec " + kSmallUri + " --arch sm_90 --store " + store.path());
  EXPECT_EQ(with_spec.exit_code, 2) << with_spec.err;
  EXPECT_NE(with_spec.err.find("--masks applies to --all and --defaults only"), std::string::npos) << with_spec.err;
  EXPECT_EQ(line_count(with_spec.err), 1) << with_spec.err;
}

// Options that contradict each other or do nothing with --spec were taken silently: --no-store
// won over --store DIR, and --jobs was ignored.
TEST(CmdCompileOptions, ContradictingOrIdleOptionsAreRefused) {
  TempDir store("compile_conflicts");
  const struct {
    std::string args, message;
  } cases[] = {
      {"--spec " + kSmallUri + " --store " + store.path() + " --no-store", "compile: give --store DIR or --no-store, not both"},
      {"--spec " + kSmallUri + " --jobs 4", "--jobs applies to --all and --defaults only"},
      {"--spec " + kSmallUri + " --jobs 0", "--jobs applies to --all and --defaults only"},
  };
  for (const auto& c : cases) {
    auto r = run_cli("compile --arch sm_90 " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
  }
}

}  // namespace
}  // namespace cpgen

namespace cpgen {
namespace {

TEST(CliCompile, StoreThatIsAFileFailsClearlyAndStoresNothing) {
  const auto r = testing::run_cli("compile --spec ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2 --store /etc/passwd");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(r.out.empty()) << "nothing may be reported as stored: " << r.out;
  EXPECT_NE(r.err.find("--store /etc/passwd is not a directory"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(CliCompile, NegativeJobsNamesTheFieldAndTheRange) {
  const auto r = testing::run_cli("compile --all --jobs -2");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--jobs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("0..1024"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("got -2"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// CPGEN_TEMPLATES_DIR: the kernel is compiled from that folder's .cuh files. A byte-identical copy
// of the built-in templates keys exactly as they do (the same store key), a copy with one file
// changed keys differently, the JSON names the folder in use, and a folder that is missing or
// holds no template is one line and exit 2. The environment is set for the child only: the test
// process reads the variable once, for its own kernels.
TEST(CliCompile, TemplatesDirCompilesFromThatFolderAndKeysByItsFiles) {
  TempDir dir("cli_templates");
  namespace fs = std::filesystem;
  const std::string same = dir.path() + "/same", changed = dir.path() + "/changed";
  fs::copy(std::string(CPGEN_SOURCE_DIR) + "/templates", same);
  fs::copy(std::string(CPGEN_SOURCE_DIR) + "/templates", changed);
  std::ofstream(changed + "/softmax.cuh", std::ios::app) << "// another revision\n";
  // A FIFO named like a template is no template: passed over, never opened (a read would wait for
  // a writer), so the copy still keys as the built-in set.
  ASSERT_EQ(::mkfifo((same + "/zz_fifo.cuh").c_str(), 0600), 0);
  auto compile = [&](const std::string& env) {
    return testing::run_shell(env + " '" + std::string(CPGEN_CLI_PATH) + "' compile --spec " + kSmallUri +
                                  " --arch sm_90a --no-store --json",
                              dir.path() + "/log.txt");
  };
  auto json_of = [](const testing::ShellResult& r) {
    const size_t brace = r.output.find('{');
    return nlohmann::json::parse(brace == std::string::npos ? std::string("null") : r.output.substr(brace));
  };
  const testing::ShellResult built_in = compile("env -u CPGEN_TEMPLATES_DIR");
  const testing::ShellResult copy = compile("CPGEN_TEMPLATES_DIR='" + same + "'");
  const testing::ShellResult other = compile("CPGEN_TEMPLATES_DIR='" + changed + "'");
  ASSERT_EQ(built_in.code, 0) << built_in.output;
  ASSERT_EQ(copy.code, 0) << copy.output;
  ASSERT_EQ(other.code, 0) << other.output;
  const nlohmann::json a = json_of(built_in), b = json_of(copy), c = json_of(other);
  EXPECT_EQ(a["templates"], "built in");
  EXPECT_EQ(b["templates"], same);
  EXPECT_EQ(c["templates"], changed);
  EXPECT_EQ(a["key"], b["key"]) << "a byte-identical copy keyed differently";
  EXPECT_NE(a["key"], c["key"]) << "a changed template kept the key";
  for (const std::string& bad : {dir.path() + "/missing", dir.path()}) {  // dir.path() holds no .cuh
    const testing::ShellResult r = compile("CPGEN_TEMPLATES_DIR='" + bad + "'");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_NE(r.output.find("CPGEN_TEMPLATES_DIR=" + bad), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace cpgen
