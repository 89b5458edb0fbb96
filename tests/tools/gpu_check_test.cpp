// tools/gpu-check.sh, the GPU session's driver, on a machine whose nvidia-smi finds no GPU (a
// stand-in on PATH makes that so on a GPU machine too, so these tests never start a benchmark):
// bad options get one line and exit 2; the GPU phases say they did not run; a phase the budget
// cannot fit is skipped and named; and the report reaches $OUT, as the device tool needs, with a
// tarball of the logs. The phases themselves run only on a GPU (issue 14).
#include <gtest/gtest.h>


#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

namespace fs = std::filesystem;

using ScriptRun = testing::ShellResult;

using testing::slurp;

class GpuCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.path() + "/bin");
    const std::string smi = dir_.path() + "/bin/nvidia-smi";
    std::ofstream(smi) << "#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n";
    fs::permissions(smi, fs::perms::owner_all);
    fs::create_directories(out());
  }

  // tools/gpu-check.sh ARGS with the stand-in nvidia-smi first on PATH and $OUT set (`env`: more
  // of env(1)'s arguments, e.g. "-u NAME").
  ScriptRun check(const std::string& args, const std::string& env = "") {
    return testing::run_shell("env " + env + " PATH='" + dir_.path() + "/bin':\"$PATH\" OUT='" + out() + "' '" +
                                  std::string(CPGEN_SOURCE_DIR) + "/tools/gpu-check.sh' --build-dir '" + build() +
                                  "' --report '" + report() + "' " + args,
                              dir_.path() + "/log.txt");
  }
  // A stand-in nvidia-smi that names a GPU, so the script takes the GPU paths that come before
  // any phase (give it a budget no phase fits: nothing then runs).
  void stand_in_gpu() {
    std::ofstream(dir_.path() + "/bin/nvidia-smi") << "#!/bin/sh\necho 'Stand-in GPU'\n";
  }
  // Stand-ins for a GPU machine's tools, so that a GPU phase runs its shell to the end without one:
  // an nvidia-smi naming a GPU, a cmake that succeeds (or prints `cmake_says` and fails), a
  // python3 that appends its arguments, one per line, to python3.args and exits 0, and
  // build()/cpgen running `cpgen_body` (sh).
  void stand_in_machine(const std::string& cpgen_body, const std::string& cmake_says = "") {
    stand_in_gpu();
    const std::string cmake = dir_.path() + "/bin/cmake", python = dir_.path() + "/bin/python3";
    std::ofstream(cmake) << "#!/bin/sh\n"
                         << (cmake_says.empty() ? "exit 0\n" : "echo '" + cmake_says + "'\nexit 1\n");
    std::ofstream(python) << "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >>'" << dir_.path()
                          << "/python3.args'; done\nexit 0\n";
    fs::create_directories(build());
    std::ofstream(build() + "/cpgen") << "#!/bin/sh\n" << cpgen_body << "\n";
    for (const std::string& f : {cmake, python, build() + "/cpgen"}) fs::permissions(f, fs::perms::owner_all);
  }
  std::string logs() const { return build() + "/gpu-check-logs"; }
  std::string out() const { return dir_.path() + "/out"; }
  std::string build() const { return dir_.path() + "/build"; }
  std::string report() const { return dir_.path() + "/report.md"; }

  testing::TempDir dir_{"gpu_check"};
};

TEST_F(GpuCheck, AnUnknownPhaseIsOneLineNamingThePhases) {
  const ScriptRun r = check("--only build,benchmarks");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "gpu-check: unknown phase 'benchmarks': the phases are build tests nccl ongpu sanitize kernels wgmma ncu "
            "ring tune (see --help)\n");
  EXPECT_FALSE(fs::exists(report()));
}

TEST_F(GpuCheck, ABudgetThatIsNotSecondsIsRefused) {
  const ScriptRun r = check("--budget 9m");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--budget '9m': a whole number of seconds"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(report()));
  const ScriptRun tune = check("--tune-candidates all");
  EXPECT_EQ(tune.code, 2);
  EXPECT_NE(tune.output.find("--tune-candidates 'all': a whole number of candidates per workload (0: all)"),
            std::string::npos)
      << tune.output;
  EXPECT_FALSE(fs::exists(report()));
  const ScriptRun direction = check("--tune-only backward");
  EXPECT_EQ(direction.code, 2);
  EXPECT_EQ(direction.output, "gpu-check: --tune-only 'backward': fwd or bwd (default: both directions) (see --help)\n");
  EXPECT_FALSE(fs::exists(report()));
}

// --ab REV[,REV...] names the revisions whose templates the wgmma and ring phases compare with:
// any one that is not a commit here is one line, exit 2, before anything runs.
// (tests/tools/templates_at_test.cpp: a commit whose parameters differ is refused too.)
TEST_F(GpuCheck, AnAbRevisionThatIsNoCommitIsRefused) {
  const ScriptRun r = check("--ab HEAD,no-such-revision --only wgmma");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output.rfind("gpu-check: --ab: 'no-such-revision': not a commit of this checkout, nor a packed copy in ", 0), 0u)
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_FALSE(fs::exists(report()));
}

// One commit named twice by --ab would be timed twice and leave both A/B tables unreadable (their
// columns are named by commit); --kernels-args with an unmatched quote cannot be split. Both are
// one line and exit 2 before anything runs.
TEST_F(GpuCheck, AnAbCommitNamedTwiceAndAnUnmatchedQuoteAreRefused) {
  const ScriptRun twice = check("--ab HEAD,HEAD~0 --only wgmma");
  EXPECT_EQ(twice.code, 2);
  EXPECT_EQ(twice.output, "gpu-check: --ab 'HEAD~0': the same commit as 'HEAD' (see --help)\n");
  const ScriptRun quote = check("--only kernels --kernels-args \"--pin 'ring_fwd_{dtype}\"");
  EXPECT_EQ(quote.code, 2);
  EXPECT_EQ(quote.output, "gpu-check: --kernels-args '--pin 'ring_fwd_{dtype}': an unmatched quote (see --help)\n");
  EXPECT_FALSE(fs::exists(report()));
}

// The wgmma phase pins forward kernels, which kernels.py refuses beside --direction bwd: one line
// and exit 2 before the build, not a failed benchmark call per pinned family after it; the kernels
// phase alone takes the backward.
TEST_F(GpuCheck, ABackwardDirectionBesideTheWgmmaPhaseIsRefused) {
  const std::string message =
      "gpu-check: --kernels-args '--direction bwd --head-dims 128': the wgmma phase pins forward kernels, which "
      "--direction bwd cannot time; run the backward with --only kernels (see --help)\n";
  const ScriptRun r = check("--only build,wgmma --kernels-args '--direction bwd --head-dims 128'");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output, message);
  const ScriptRun equals = check("--only wgmma --kernels-args '--direction=bwd'");
  EXPECT_EQ(equals.code, 2) << equals.output;
  EXPECT_FALSE(fs::exists(report()));
  stand_in_machine("exit 0");
  const ScriptRun kernels = check("--only kernels --budget 600 --kernels-args '--direction bwd'");
  EXPECT_EQ(kernels.code, 0) << kernels.output;
}

// --kernels-args reaches bench/kernels.py split as the shell would split it: a quoted word is one
// argument, without its quotes (they were passed on literally, so a --pin template never matched).
TEST_F(GpuCheck, TheKernelsArgsReachTheBenchmarkAsTheShellWouldSplitThem) {
  stand_in_machine("exit 0");
  const ScriptRun r = check("--only kernels --budget 600 --kernels-args \"--dtypes bf16 --pin 'ring_fwd_{dtype} *'\"");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string args = slurp(dir_.path() + "/python3.args");
  EXPECT_NE(args.find("\n--dtypes\nbf16\n--pin\nring_fwd_{dtype} *\n"), std::string::npos) << args;
}

// On a warm machine an earlier call's logs stay: a configure that fails reports its own log (the
// report showed the earlier call's "[100%] Built target" and not the cause), and a ring phase
// whose script writes no table does not show the earlier call's table and verdict.
TEST_F(GpuCheck, AWarmMachinesEarlierLogsDoNotStandForThisCalls) {
  stand_in_machine("echo 'cpgen: no device' >&2; exit 1", "CMake Error: Could not find CLI11");
  fs::create_directories(logs() + "/phases");
  std::ofstream(logs() + "/build.log") << "[100%] Built target cpgen\n";
  const ScriptRun build = check("--only build");
  EXPECT_EQ(build.code, 1) << build.output;
  std::string text = slurp(report());
  EXPECT_NE(text.find("| build | FAILED"), std::string::npos) << text;
  EXPECT_NE(text.find("CMake Error: Could not find CLI11"), std::string::npos) << text;
  EXPECT_EQ(text.find("Built target"), std::string::npos) << text;

  stand_in_machine("echo 'cpgen: no device' >&2; exit 1");
  std::ofstream(logs() + "/ring-overhead.md") << "# An earlier table\n\n**target MISSED: overhead +11.26%**\n";
  const ScriptRun ring = check("--only ring --budget 600");
  text = slurp(report());
  EXPECT_EQ(text.find("An earlier table"), std::string::npos) << text;
  EXPECT_EQ(text.find("+11.26%"), std::string::npos) << text;
  EXPECT_NE(text.find("| ring | no verdict"), std::string::npos) << text;
}

// A benchmark run that fails fails the call (exit 1), as a failed test does: the kernels, wgmma
// and ring phases returned 0 whatever their runs did, and only the status lines said FAILED. With
// --ab the wgmma phase leaves out the mma.sync and ping-pong runs (the A/B needs the minutes).
TEST_F(GpuCheck, ABenchmarkRunThatFailsFailsTheCall) {
  stand_in_machine("exit 0");
  const std::string python = dir_.path() + "/bin/python3";
  std::ofstream(python) << "#!/bin/sh\ncase \"$*\" in *kernels.py*) echo 'kernels.py: boom' >&2; exit 1 ;; esac\nexit 0\n";
  fs::permissions(python, fs::perms::owner_all);
  const ScriptRun kernels = check("--only kernels --budget 600");
  EXPECT_EQ(kernels.code, 1) << kernels.output;
  std::string text = slurp(report());
  EXPECT_NE(text.find("| kernels | FAILED (exit 1): kernels.py: boom"), std::string::npos) << text;

  const ScriptRun wgmma = check("--only wgmma --budget 600 --ab HEAD");
  EXPECT_EQ(wgmma.code, 1) << wgmma.output;
  text = slurp(report());
  EXPECT_NE(text.find("| wgmma | FAILED (exit 1): kernels.py: boom; mma.sync: not run: --ab; ping-pong: not run: --ab; "
                      "persistent: FAILED (exit 1)"),
            std::string::npos)
      << text;

  std::ofstream(python) << "#!/bin/sh\nexit 0\n";  // every run passes: the call does too
  EXPECT_EQ(check("--only kernels --budget 600").code, 0);
}

// A tune whose export fails says so in its status and ships no cache (it said "ok; cache ...").
TEST_F(GpuCheck, ATuneWhoseExportFailsSaysNoCache) {
  stand_in_machine("case \"$1 $2\" in 'db export') echo 'cpgen db export: disk full' >&2; exit 1 ;; esac; exit 0");
  const ScriptRun r = check("--only tune --tune-only fwd --budget 600");
  EXPECT_EQ(r.code, 1) << r.output;
  const std::string text = slurp(report());
  EXPECT_NE(text.find("| tune | FAILED, stopped or cut short (below); NO cache: the export failed"), std::string::npos)
      << text;
  EXPECT_NE(text.find("cpgen db export: disk full"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(out() + "/h200-examples.json"));
}

// The commits of --ab run under their own templates, where this tree's tuned records do not apply.
TEST_F(GpuCheck, RingTuneWithAnAbIsRefused) {
  const ScriptRun r = check("--ring-tune --ab HEAD --only ring");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output, "gpu-check: --ring-tune with --ab: the commits' templates would run defaults against this "
                      "tree's tuned kernels (see --help)\n");
  EXPECT_FALSE(fs::exists(report()));
}

TEST_F(GpuCheck, WithoutAGpuTheGpuPhasesSayNotRunAndTheReportReachesOut) {
  const ScriptRun r = check("--skip build,tests,nccl,ongpu");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string text = slurp(report());
  for (const char* phase : {"sanitize", "kernels", "wgmma", "ncu", "ring", "tune"})
    EXPECT_NE(text.find(std::string("| ") + phase + " | not run: no GPU"), std::string::npos) << phase << "\n" << text;
  EXPECT_EQ(text.find("| build |"), std::string::npos) << "a skipped phase has no row";
  EXPECT_EQ(slurp(out() + "/report.md"), text);
  EXPECT_TRUE(fs::exists(out() + "/gpu-check-logs.tar.gz"));
  // Nothing was built: a phase that finds no GPU stops before it needs binaries.
  EXPECT_FALSE(fs::exists(build() + "/CMakeCache.txt"));
}

// A failed compile's message holds one line of its log; the whole log, options and source in the
// folder it names ($TMPDIR/cpgen-<uid>/failed/...) come back with the logs.
TEST_F(GpuCheck, FailedCompilesComeBackWithTheLogs) {
  const std::string tmp = dir_.path() + "/tmp";
  const std::string failed = tmp + "/cpgen-" + std::to_string(::getuid()) + "/failed/ring_fwd_x-0123456789ab";
  fs::create_directories(failed + "/cpgen");
  std::ofstream(failed + "/nvrtc.log") << "ring_fwd_x.cu(3): error: broken\n";
  std::ofstream(failed + "/options.txt") << "--gpu-architecture=sm_90a\n";
  std::ofstream(failed + "/ring_fwd_x.cu") << "// source\n";
  std::ofstream(failed + "/cpgen/params.cuh") << "// a template copy, left behind\n";
  const ScriptRun r = check("--skip build,tests,nccl,ongpu", "TMPDIR='" + tmp + "'");
  ASSERT_EQ(r.code, 0) << r.output;
  const testing::ShellResult listing =
      testing::run_shell("tar -tzf '" + out() + "/gpu-check-logs.tar.gz'", dir_.path() + "/tar.txt");
  ASSERT_EQ(listing.code, 0) << listing.output;
  for (const char* name : {"failed-compiles/ring_fwd_x-0123456789ab/nvrtc.log",
                           "failed-compiles/ring_fwd_x-0123456789ab/options.txt",
                           "failed-compiles/ring_fwd_x-0123456789ab/ring_fwd_x.cu"})
    EXPECT_NE(listing.output.find(name), std::string::npos) << name << "\n" << listing.output;
  EXPECT_EQ(listing.output.find("params.cuh"), std::string::npos) << listing.output;
}

TEST_F(GpuCheck, APhaseTheBudgetCannotFitIsSkippedAndNamed) {
  const ScriptRun r = check("--only tests --budget 5");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string text = slurp(report());
  EXPECT_NE(text.find("| tests | skipped: "), std::string::npos) << text;
  EXPECT_NE(text.find("the phase needs about 120"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(build() + "/CMakeCache.txt"));
}

TEST_F(GpuCheck, OnlyRunsItsPhasesInTheOrderItNamesThem) {
  const ScriptRun r = check("--only tune,sanitize,tune");
  ASSERT_EQ(r.code, 0) << r.output;
  const size_t tune = r.output.find("gpu-check: phase tune");
  const size_t sanitize = r.output.find("gpu-check: phase sanitize");
  ASSERT_NE(tune, std::string::npos) << r.output;
  ASSERT_NE(sanitize, std::string::npos) << r.output;
  EXPECT_LT(tune, sanitize) << r.output;
  EXPECT_EQ(r.output.find("gpu-check: phase tune", tune + 1), std::string::npos) << "a phase named twice runs once";
}

// tools/gpu-sanitize.sh with a stand-in compute-sanitizer: a run that outlasts --run-limit is
// stopped and named, the others still run, and the script fails.
TEST_F(GpuCheck, TheSanitizerStopsARunPastItsLimitAndGoesOn) {
  const std::string bin = dir_.path() + "/bin";
  std::ofstream(bin + "/compute-sanitizer")
      << "#!/bin/sh\ncase \"$*\" in *racecheck*) exec sleep 30 ;; esac\n"
         "echo '[  PASSED  ] 1 test.'\necho '========= ERROR SUMMARY: 0 errors'\n";
  fs::permissions(bin + "/compute-sanitizer", fs::perms::owner_all);
  fs::create_directories(build() + "/tests");
  std::ofstream(build() + "/tests/cpgen_tests") << "#!/bin/sh\n";
  fs::permissions(build() + "/tests/cpgen_tests", fs::perms::owner_all);
  const ScriptRun r = testing::run_shell(
      "PATH='" + bin + "':\"$PATH\" '" + std::string(CPGEN_SOURCE_DIR) + "/tools/gpu-sanitize.sh' --build-dir '" +
          build() + "' --tools racecheck,memcheck --filter 'Some.*' --run-limit 1 2>/dev/null",
      dir_.path() + "/sanitize.txt");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("racecheck  Some.*  rc=124"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("STOPPED after 1 s (--run-limit)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("memcheck  Some.*  rc=0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ERROR SUMMARY: 0 errors"), std::string::npos) << r.output;

  const ScriptRun bad = testing::run_shell(
      "'" + std::string(CPGEN_SOURCE_DIR) + "/tools/gpu-sanitize.sh' --build-dir '" + build() + "' --run-limit 5m",
      dir_.path() + "/bad.txt");
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.output, "gpu-sanitize: --run-limit '5m': a whole number of seconds\n");
}

// Two invocations sharing --logs, each with one filter, the two filters alike in their first 12
// characters (as the wgmma family's are): each run keeps its own log. On the H200 of 2026-11-27
// the persistent test's racecheck log was overwritten by the plain test's this way.
TEST_F(GpuCheck, SanitizerRunsWithFiltersThatBeginAlikeKeepTheirOwnLogs) {
  const std::string bin = dir_.path() + "/bin";
  std::ofstream(bin + "/compute-sanitizer")
      << "#!/bin/sh\necho \"$*\"\necho '[  PASSED  ] 1 test.'\necho '========= ERROR SUMMARY: 0 errors'\n";
  fs::permissions(bin + "/compute-sanitizer", fs::perms::owner_all);
  fs::create_directories(build() + "/tests");
  std::ofstream(build() + "/tests/cpgen_tests") << "#!/bin/sh\n";
  fs::permissions(build() + "/tests/cpgen_tests", fs::perms::owner_all);
  const std::string logs = dir_.path() + "/logs";
  for (const char* filter : {"GpuRingWgmma.LoopbackReproduces", "GpuRingWgmma.PersistentLoopback"}) {
    const ScriptRun r = testing::run_shell("PATH='" + bin + "':\"$PATH\" '" + std::string(CPGEN_SOURCE_DIR) +
                                               "/tools/gpu-sanitize.sh' --build-dir '" + build() + "' --logs '" + logs +
                                               "' --tools synccheck --filter '" + filter + "' 2>/dev/null",
                                           dir_.path() + "/sanitize.txt");
    ASSERT_EQ(r.code, 0) << r.output;
  }
  std::vector<std::string> contents;
  for (const auto& entry : fs::directory_iterator(logs)) {
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"),
              std::string::npos)
        << name << ": the device tool returns only files named in letters, digits, '.', '_' and '-'";
    contents.push_back(slurp(entry.path().string()));
  }
  ASSERT_EQ(contents.size(), 2u);
  std::sort(contents.begin(), contents.end());
  EXPECT_NE(contents[0].find("--gtest_filter=GpuRingWgmma.LoopbackReproduces"), std::string::npos) << contents[0];
  EXPECT_NE(contents[1].find("--gtest_filter=GpuRingWgmma.PersistentLoopback"), std::string::npos) << contents[1];
}

// Every filter of tools/gpu-sanitize.sh's default runs names tests of this binary: each of its
// patterns, those it runs and those it leaves out, matches at least one. A parametrized test's
// name starts with its instantiation, so a pattern such as 'StepFwdGpuRandom*' matched nothing
// and the random-input step tests went unsanitized on the first two GPUs.
TEST_F(GpuCheck, EverySanitizerFilterNamesTestsThatExist) {
  const ScriptRun list = testing::run_shell("'" + std::string(CPGEN_SOURCE_DIR) + "/tools/gpu-sanitize.sh' --list",
                                            dir_.path() + "/list.txt");
  ASSERT_EQ(list.code, 0) << list.output;
  std::istringstream lines(list.output);
  std::string tool, filter;
  int runs = 0;
  while (lines >> tool >> filter) {
    ++runs;
    std::string patterns = filter;
    std::replace(patterns.begin(), patterns.end(), '-', ':');  // gtest: POSITIVE[-NEGATIVE]
    std::istringstream each(patterns);
    for (std::string pattern; std::getline(each, pattern, ':');) {
      if (pattern.empty()) continue;
      const ScriptRun names = testing::run_shell("/proc/" + std::to_string(::getpid()) +
                                                     "/exe --gtest_list_tests --gtest_filter='" + pattern + "'",
                                                 dir_.path() + "/names.txt");
      ASSERT_EQ(names.code, 0) << names.output;
      EXPECT_NE(names.output.find("\n  "), std::string::npos)
          << tool << ": the pattern '" << pattern << "' of '" << filter << "' names no test";
    }
  }
  EXPECT_EQ(runs, 13) << list.output;  // three runs for each tool but racecheck, four for it
}

// The kernels packed on the dev machine (tools/pack-gpu-deps.sh: .gpudeps/kernels.tar.xz) go
// into the call's kernel store, in the build folder unless CPGEN_KERNEL_DIR names one, before any
// phase; an entry already there (a warm machine's) is kept; the report counts what came along and
// what the call added.
TEST_F(GpuCheck, OnAGpuTheCarriedKernelsGoIntoTheStoreAndTheReportCountsThem) {
  stand_in_gpu();
  const std::string deps = dir_.path() + "/deps", packed = dir_.path() + "/packed";
  fs::create_directories(packed);
  fs::create_directories(deps);
  std::ofstream(packed + "/aa.cpgenk") << "carried a";
  std::ofstream(packed + "/bb.cpgenk") << "carried b";
  std::ofstream(deps + "/KERNELS") << "packed at commit 1234567\n";
  ASSERT_EQ(testing::run_shell("tar -C '" + packed + "' -cJf '" + deps + "/kernels.tar.xz' .", dir_.path() + "/tar.txt").code, 0);
  const std::string store = build() + "/kernel-store";
  fs::create_directories(store);
  std::ofstream(store + "/bb.cpgenk") << "warm";

  const ScriptRun r = check("--deps '" + deps + "' --only tests --budget 5", "-u CPGEN_KERNEL_DIR");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(slurp(store + "/aa.cpgenk"), "carried a");
  EXPECT_EQ(slurp(store + "/bb.cpgenk"), "warm") << "an entry of an earlier call is kept";
  const std::string text = slurp(report());
  EXPECT_NE(text.find("- kernel store " + store + ": 2 carried in " + deps +
                      "/kernels.tar.xz (packed at commit 1234567); 0 entries added (compiled here) by this call so far"),
            std::string::npos)
      << text;

  // CPGEN_KERNEL_DIR, when set, is the store; without a GPU nothing is unpacked and the report
  // has no store line.
  const std::string own = dir_.path() + "/own-store";
  const ScriptRun mine = check("--deps '" + deps + "' --only tests --budget 5", "CPGEN_KERNEL_DIR='" + own + "'");
  ASSERT_EQ(mine.code, 0) << mine.output;
  EXPECT_TRUE(fs::exists(own + "/aa.cpgenk"));
  SetUp();  // the stand-in that finds no GPU again
  const ScriptRun none = check("--deps '" + deps + "' --only tests --budget 5", "CPGEN_KERNEL_DIR='" + own + "-2'");
  ASSERT_EQ(none.code, 0) << none.output;
  EXPECT_FALSE(fs::exists(own + "-2"));
  EXPECT_EQ(slurp(report()).find("- kernel store"), std::string::npos) << slurp(report());
}

// The tests phase leaves out the CPU-only families (CPU sessions and CI run them); none of them
// may be a test that needs a GPU. Every test in a file that asks for one (CPGEN_REQUIRE_GPU,
// have_gpu, device_arch) must stay outside the pattern, and the pattern must still take the
// heavy CPU families.
TEST_F(GpuCheck, TheTestsPhaseLeavesOutOnlyTestsOfFilesThatNeverAskForAGpu) {
  const ScriptRun list = check("--list-cpu-only");
  ASSERT_EQ(list.code, 0) << list.output;
  std::string pattern = list.output;
  while (!pattern.empty() && pattern.back() == '\n') pattern.pop_back();
  ASSERT_FALSE(pattern.empty());
  const std::regex cpu_only(pattern);
  for (const char* name : {"CompileMatrix.EveryDefaultCompilesWithoutSpillsForSm90",
                           "EveryDtypeAndHeadDim/EmulatedBackwardDefaults.GradientsOfEveryMaskGroupAndRingSize/bf16_hd128",
                           "StepFwdWgmmaCompile.SassHoldsWgmmaTmaAndTheMeasuredLoopOrder", "CliCompile.AllCoversTheBackwardKinds"})
    EXPECT_TRUE(std::regex_search(name, cpu_only)) << name;

  const std::regex asks_for_gpu(R"(CPGEN_REQUIRE_GPU|have_gpu\(|device_arch\(0\))");
  const std::regex test_macro(R"((?:TEST|TEST_F|TEST_P|TYPED_TEST)\(\s*(\w+)\s*,\s*(\w+)\s*\))");
  int gpu_files = 0, gpu_tests = 0;
  for (const auto& entry : fs::recursive_directory_iterator(std::string(CPGEN_SOURCE_DIR) + "/tests")) {
    if (entry.path().extension() != ".cpp") continue;
    const std::string text = slurp(entry.path().string());
    if (!std::regex_search(text, asks_for_gpu)) continue;
    ++gpu_files;
    for (std::sregex_iterator m(text.begin(), text.end(), test_macro), end; m != end; ++m) {
      const std::string name = (*m)[1].str() + "." + (*m)[2].str();
      ++gpu_tests;
      EXPECT_FALSE(std::regex_search(name, cpu_only))
          << name << " (" << entry.path().filename().string() << ") may need a GPU but matches the CPU-only pattern";
    }
  }
  EXPECT_GE(gpu_files, 15) << "the GPU test files were not found";
  EXPECT_GE(gpu_tests, 100);
}

}  // namespace
}  // namespace cpgen
