// The runtime's kernel selection (runtime/api/kernel_select.h) against databases the test builds
// through the cache API, with the environment and device class this machine's selection code
// computes: the tuned winner is what RingAttention and `cpgen explain` both pick, a row of a stale
// environment is passed over, and without a (readable) database the shipped cache or the default
// answers. Needs no GPU; the last test runs the ring with per-step-type winners where one exists.
#include "runtime/api/kernel_select.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <fstream>
#include <optional>

#include "cache/database.h"
#include "cache/records.h"
#include "cpgen/error.h"
#include "cpgen/ring_attention.h"
#include "generator/kernel_spec_wgmma.h"
#include "runtime/api/gpu_ring_run.h"
#include "runtime/cuda/module.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/ring/reference.h"
#include "tests/cache/cache_fixtures.h"
#include "tests/runtime/api/gpu_ring_check.h"
#include "test_util.h"

namespace cpgen::testing {
namespace {

constexpr const char* kArch = "sm_90a";

// Local length 16384 over two zigzag ranks: three step types (diagonal, kv-half, q-half).
Problem zigzag_problem() {
  Problem p;
  p.name = "s";
  p.q_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.seq_len = 32768;
  p.cp_size = 2;
  return p;
}
const char* kShapeJson =
    R"('{"name": "s", "q_heads": 32, "kv_heads": 8, "head_dim": 128, "seq_len": 32768, "cp_size": 2, "dtype": "bf16", "causal": true, "scheme": "zigzag"}')";

// Feasible candidates of the problem's kernel family other than the documented default, so a
// database winner is told apart from the fallbacks.
std::vector<KernelSpec> non_default_candidates(const Problem& p, const std::string& arch) {
  const int group = static_cast<int>(p.gqa_group());
  const KernelSpec def = KernelSpec::default_for(p.dtype, static_cast<int>(p.head_dim), p.causal, group);
  std::vector<KernelSpec> out;
  for (const KernelSpec& s : KernelSpec::candidates_for(p.dtype, static_cast<int>(p.head_dim), p.causal, group))
    if (!(s == def) && check_feasibility(s, arch).feasible) out.push_back(s);
  return out;
}

Record record_of(const WorkloadKey& w, const KernelSpec& spec, double ms, const Environment& env) {
  Record r = test_record(w, spec.block_m, spec.block_n, spec.warps, spec.stages, ms, Disposition::kOk, env);
  EXPECT_EQ(r.kernel_uri, spec.uri());
  return r;
}

// Stores a tuned winner of w: its record and the pin that `cpgen tune` writes.
void put_winner(Database& db, const WorkloadKey& w, const KernelSpec& spec, double ms, const Environment& env) {
  const Record r = record_of(w, spec, ms, env);
  put_record(db, r);
  db.transaction([&] { pin_winner(db, w, {spec.uri(), ms, r.env.key(), "tune"}); });
}

// The same for a kernel test_record cannot name (the wgmma family's): the record carries spec's URI.
void put_winner_uri(Database& db, const WorkloadKey& w, const KernelSpec& spec, double ms, const Environment& env) {
  Record r = test_record(w, 128, 64, 4, 2, ms, Disposition::kOk, env);
  r.kernel_uri = spec.uri();
  r.env = env.for_kernel(r.kernel_uri);
  put_record(db, r);
  db.transaction([&] { pin_winner(db, w, {spec.uri(), ms, r.env.key(), "tune"}); });
}

// A persistent wgmma winner for p: the family's default tiles but BLOCK_N 64, so that its plain
// launch is told apart from a fallback to the default.
KernelSpec persistent_winner_for(const Problem& p) {
  KernelSpec spec = wgmma_default_for(p.dtype, static_cast<int>(p.head_dim), p.causal, static_cast<int>(p.gqa_group()));
  spec.block_n = 64;
  spec.persistent = true;
  return spec;
}

class KernelSelectTest : public TempDirTest {
 protected:
  Environment here = current_environment(0);           // as select_ring_kernels computes it
  DeviceClass device = device_class_for(kArch, 0);      // likewise
};

TEST_F(KernelSelectTest, RuntimePicksTheTunedWinnerAndExplainSaysTheSame) {
  const Problem p = zigzag_problem();
  const std::vector<KernelSpec> specs = non_default_candidates(p, kArch);
  ASSERT_GE(specs.size(), 2u);
  const WorkloadKey diag = workload_for(p, StepType::kDiagonal, device);
  const WorkloadKey kv_half = workload_for(p, StepType::kZigzagKvHalf, device);
  {
    Database db(path("t.db"));
    put_winner(db, diag, specs[0], 0.75, here);
    put_winner(db, kv_half, specs[1], 0.5, here);
    // Faster, but made under another driver: never trusted.
    Environment stale = here;
    stale.driver_version = "11.0";
    put_record(db, record_of(diag, specs[1], 0.01, stale));
  }
  const RingKernelSelection sel = select_ring_kernels(p, path("t.db"), kArch, 0);
  EXPECT_TRUE(sel.database_used) << sel.database_note;
  EXPECT_EQ(sel.device.arch, kArch);
  ASSERT_EQ(sel.steps.size(), 3u);
  EXPECT_EQ(sel.steps[0].workload.step, StepType::kDiagonal) << "steps[0] is what ring step 0 runs";
  const Selection& d = sel.for_step(StepType::kDiagonal).selection;
  EXPECT_EQ(d.source, ConfigSource::kDatabaseExact) << d.reason;
  EXPECT_EQ(d.spec, specs[0]) << d.spec.uri();
  EXPECT_EQ(d.origin, path("t.db"));
  EXPECT_EQ(d.ignored_other_environment, 1);
  const Selection& kv = sel.for_step(StepType::kZigzagKvHalf).selection;
  EXPECT_EQ(kv.source, ConfigSource::kDatabaseExact) << kv.reason;
  EXPECT_EQ(kv.spec, specs[1]) << kv.spec.uri();
  // Never tuned: the shipped default-heuristic cache answers.
  const Selection& q = sel.for_step(StepType::kZigzagQHalf).selection;
  EXPECT_EQ(q.source, ConfigSource::kPretunedPattern) << q.reason;

  CliResult r = run_cli("explain --json --arch " + std::string(kArch) + " --db " + path("t.db") + " --shape " + kShapeJson);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json steps = nlohmann::json::parse(r.out)["shapes"][0]["steps"];
  ASSERT_EQ(steps.size(), sel.steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i]["step_type"], step_type_name(sel.steps[i].workload.step)) << i;
    EXPECT_EQ(steps[i]["kernel"], sel.steps[i].selection.spec.uri()) << i;
    EXPECT_EQ(steps[i]["source"], config_source_name(sel.steps[i].selection.source)) << i;
  }
}

// Issue 13: a tuned winner of the sm_90a wgmma family is selected like any other, and explain
// names it (its URI says wgmma) with the database as its source; the step types without a record
// keep the documented default, which on sm_90a at bf16, head dim 128, GQA 4 (timed on an H200,
// kWgmmaDefaultShapes) is the wgmma family's default tiles in the plain launch.
TEST_F(KernelSelectTest, AWgmmaWinnerIsSelectedAndExplained) {
  const Problem p = zigzag_problem();
  const WorkloadKey diag = workload_for(p, StepType::kDiagonal, device);
  const KernelSpec wgmma_default = wgmma_default_for(p.dtype, static_cast<int>(p.head_dim), p.causal,
                                                     static_cast<int>(p.gqa_group()));
  KernelSpec wgmma = wgmma_default;  // a tuned winner that is not the default
  wgmma.persistent = true;
  {
    Database db(path("t.db"));
    put_winner_uri(db, diag, wgmma, 0.4, here);
  }
  const RingKernelSelection sel = select_ring_kernels(p, path("t.db"), kArch, 0);
  const Selection& d = sel.for_step(StepType::kDiagonal).selection;
  EXPECT_EQ(d.source, ConfigSource::kDatabaseExact) << d.reason;
  EXPECT_EQ(d.spec, wgmma);
  const Selection& q = sel.for_step(StepType::kZigzagQHalf).selection;
  EXPECT_EQ(q.spec, wgmma_default) << "the sm_90a default at bf16 hd128 GQA 4: " << q.spec.uri();

  // For a loopback ring: an NCCL ring runs the persistent winner as its plain launch (below).
  CliResult r = run_cli("explain --json --ring loopback --arch " + std::string(kArch) + " --db " + path("t.db") +
                        " --shape " + kShapeJson);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json steps = nlohmann::json::parse(r.out)["shapes"][0]["steps"];
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps[0]["kernel"], wgmma.uri());
  EXPECT_EQ(steps[0]["source"], config_source_name(ConfigSource::kDatabaseExact));
}

// Beside NCCL's exchange kernels a persistent winner runs as the plain launch of its tiles, and
// its reason says so; the other steps' selections are left as they were.
TEST_F(KernelSelectTest, APersistentWinnerRunsAsItsPlainLaunchBesideExchangeKernels) {
  const Problem p = zigzag_problem();
  const WorkloadKey diag = workload_for(p, StepType::kDiagonal, device);
  const KernelSpec persistent = persistent_winner_for(p);
  {
    Database db(path("t.db"));
    put_winner_uri(db, diag, persistent, 0.4, here);
  }
  RingKernelSelection sel = select_ring_kernels(p, path("t.db"), kArch, 0);
  const RingKernelSelection before = sel;
  ASSERT_EQ(sel.for_step(StepType::kDiagonal).selection.spec, persistent);
  use_plain_launches_beside_exchange_kernels(sel);
  KernelSpec plain = persistent;
  plain.persistent = false;
  const Selection& d = sel.for_step(StepType::kDiagonal).selection;
  EXPECT_EQ(d.spec, plain) << d.spec.uri();
  EXPECT_EQ(d.source, ConfigSource::kDatabaseExact);
  EXPECT_NE(d.reason.find("runs as its plain launch " + plain.uri() + " instead of " + persistent.uri()),
            std::string::npos)
      << d.reason;
  ASSERT_EQ(sel.steps.size(), before.steps.size());
  for (size_t i = 1; i < sel.steps.size(); ++i) {
    EXPECT_EQ(sel.steps[i].selection.spec, before.steps[i].selection.spec) << i;
    EXPECT_EQ(sel.steps[i].selection.reason, before.steps[i].selection.reason) << i;
  }
  ASSERT_EQ(sel.backward_steps.size(), before.backward_steps.size());
  for (size_t i = 0; i < sel.backward_steps.size(); ++i)
    EXPECT_EQ(sel.backward_steps[i].selection.spec, before.backward_steps[i].selection.spec) << i;
}

// explain answers for an NCCL ring unless told the ranks share one GPU: a persistent winner shows
// as the plain launch there, as RingAttention runs it, and as itself for --ring loopback.
TEST_F(KernelSelectTest, ExplainShowsThePlainLaunchOfAPersistentWinnerForAnNcclRing) {
  const Problem p = zigzag_problem();
  const KernelSpec persistent = persistent_winner_for(p);
  KernelSpec plain = persistent;
  plain.persistent = false;
  {
    Database db(path("t.db"));
    put_winner_uri(db, workload_for(p, StepType::kDiagonal, device), persistent, 0.4, here);
  }
  const std::string args = " --arch " + std::string(kArch) + " --db " + path("t.db") + " --shape " + kShapeJson;
  for (const std::string ring : {"", " --ring nccl", " --ring loopback"}) {
    SCOPED_TRACE(ring.empty() ? "default" : ring);
    const std::string want = ring == " --ring loopback" ? persistent.uri() : plain.uri();
    CliResult r = run_cli("explain --json" + ring + args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json report = nlohmann::json::parse(r.out);
    EXPECT_EQ(report["ring"], ring == " --ring loopback" ? "loopback" : "nccl");
    EXPECT_EQ(report["shapes"][0]["steps"][0]["kernel"], want);
    EXPECT_EQ(report["shapes"][0]["steps"][0]["source"], "database-exact");
    CliResult text = run_cli("explain" + ring + args);
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_NE(text.out.find("diagonal: " + want + "\n"), std::string::npos) << text.out;
  }
  CliResult bad = run_cli("explain --ring ib" + args);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.out, "");
  EXPECT_NE(bad.err.find("--ring 'ib' is not a ring; nccl (one GPU per rank) or loopback"), std::string::npos) << bad.err;
}

// With an SM margin ($CPGEN_SM_MARGIN, RingOptions::sm_margin) a persistent winner stays persistent
// beside NCCL's kernels and says how many SMs it leaves them; explain follows the variable, and a
// value that is no count of SMs is bad input naming it.
TEST_F(KernelSelectTest, AnSmMarginKeepsAPersistentWinnerBesideExchangeKernels) {
  const Problem p = zigzag_problem();
  const KernelSpec persistent = persistent_winner_for(p);
  {
    Database db(path("t.db"));
    put_winner_uri(db, workload_for(p, StepType::kDiagonal, device), persistent, 0.4, here);
  }
  RingKernelSelection sel = select_ring_kernels(p, path("t.db"), kArch, 0);
  place_beside_exchange_kernels(sel, 8);
  const Selection& d = sel.for_step(StepType::kDiagonal).selection;
  EXPECT_EQ(d.spec, persistent) << d.spec.uri();
  EXPECT_NE(d.reason.find("leaves 8 SM(s) to the ring's NCCL kernels"), std::string::npos) << d.reason;

  EXPECT_EQ(ring_sm_margin(3), 3);
  // Below -1 the option was taken for -1 (the environment's margin) without a word.
  EXPECT_THROW(ring_sm_margin(-2), Error);
  {
    ScopedEnv unset("CPGEN_SM_MARGIN", nullptr);
    EXPECT_EQ(ring_sm_margin(-1), -1);
  }
  {
    ScopedEnv set("CPGEN_SM_MARGIN", "16");
    EXPECT_EQ(ring_sm_margin(-1), 16);
    EXPECT_EQ(ring_sm_margin(0), 0);  // the option wins
    CliResult r = run_cli("explain --json --arch " + std::string(kArch) + " --db " + path("t.db") + " --shape " + kShapeJson);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["shapes"][0]["steps"][0]["kernel"], persistent.uri());
  }
  for (const char* bad : {"x", "-2", "8 SMs", "99999"}) {
    SCOPED_TRACE(bad);
    ScopedEnv set("CPGEN_SM_MARGIN", bad);
    try {
      ring_sm_margin(-1);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
      EXPECT_NE(std::string(e.what()).find(std::string("CPGEN_SM_MARGIN '") + bad + "' is not allowed"), std::string::npos)
          << e.what();
    }
    CliResult r = run_cli("explain --arch " + std::string(kArch) + " --db " + path("t.db") + " --shape " + kShapeJson);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(line_count(r.err), 1) << r.err;
  }
}

// The SMs a persistent launch covers: all but the margin, which must leave one.
TEST(ResidentCtas, AllSmsButTheMargin) {
  EXPECT_EQ(resident_ctas_beside(2, 132, 0, "k"), 264);
  EXPECT_EQ(resident_ctas_beside(1, 132, 8, "k"), 124);
  EXPECT_EQ(resident_ctas_beside(1, 132, 131, "k"), 1);
  for (int margin : {132, -1}) {
    try {
      resident_ctas_beside(1, 132, margin, "ring_fwd_x");
      ADD_FAILURE() << margin;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
      EXPECT_NE(std::string(e.what()).find("ring_fwd_x: an SM margin of " + std::to_string(margin) +
                                           " is not allowed on a device of 132 SMs; allowed: 0 to 131"),
                std::string::npos)
          << e.what();
    }
  }
}

// A tuned backward winner is selected for its bwd- step type only, and explain shows it among the
// shape's backward steps; the forward step of the same shape keeps its own selection.
TEST_F(KernelSelectTest, TunedBackwardWinnerIsSelectedAndExplained) {
  const Problem p = zigzag_problem();
  const WorkloadKey bwd_diag = workload_for(p, StepType::kBwdDiagonal, device);
  const KernelSpec bwd_default = KernelSpec::backward_default_for_arch(Dtype::kBf16, 128, true, 4, kArch);
  KernelSpec tuned = bwd_default;
  tuned.block_m = 32;
  tuned.warps = 4;
  ASSERT_TRUE(check_feasibility(tuned, kArch).feasible) << tuned.uri();
  ASSERT_NE(tuned, bwd_default);
  {
    Database db(path("t.db"));
    put_winner_uri(db, bwd_diag, tuned, 0.5, here);
  }
  const RingKernelSelection sel = select_ring_kernels(p, path("t.db"), kArch, 0);
  ASSERT_EQ(sel.backward_steps.size(), 3u);
  EXPECT_EQ(sel.backward_steps[0].workload.step, StepType::kBwdDiagonal);
  const Selection& b = sel.for_step(StepType::kBwdDiagonal).selection;
  EXPECT_EQ(b.source, ConfigSource::kDatabaseExact) << b.reason;
  EXPECT_EQ(b.spec, tuned);
  // The untuned backward steps get a backward kernel too, never a forward one.
  for (const StepSelection& s : sel.backward_steps) EXPECT_EQ(s.selection.spec.kind, KernelKind::kBackwardStep) << s.selection.spec.uri();
  const Selection& fwd = sel.for_step(StepType::kDiagonal).selection;
  EXPECT_EQ(fwd.spec, forward_default_for_arch(Dtype::kBf16, 128, true, 4, kArch));
  EXPECT_NE(fwd.source, ConfigSource::kDatabaseExact) << "the backward record must not answer a forward step";

  CliResult r = run_cli("explain --json --arch " + std::string(kArch) + " --db " + path("t.db") + " --shape " + kShapeJson);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json shape = nlohmann::json::parse(r.out)["shapes"][0];
  ASSERT_EQ(shape["backward_steps"].size(), 3u);
  const nlohmann::json& first = shape["backward_steps"][0];
  EXPECT_EQ(first["step_type"], "bwd-diagonal");
  EXPECT_EQ(first["direction"], "backward");
  EXPECT_EQ(first["kernel"], tuned.uri());
  EXPECT_EQ(first["source"], "database-exact");
  EXPECT_EQ(shape["steps"][0]["direction"], "forward");
  CliResult text = run_cli("explain --arch " + std::string(kArch) + " --db " + path("t.db") + " --shape " + kShapeJson);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("bwd-diagonal: " + tuned.uri()), std::string::npos) << text.out;
}

// Every kernel selection picks, forward and backward, carries exactly the mask features the
// ring passes tables and a cap for (kernel_needs_key_intervals / kernel_needs_softcap): a kernel
// with intervals launched without them reads null tables, one without ignores the mask. Problems
// with each feature alone, and a tuned unmasked backward winner, which a masked workload falls
// back to with the flags set.
TEST_F(KernelSelectTest, EverySelectedKernelHasTheMaskFeaturesTheRingPassesTablesFor) {
  const Problem plain = zigzag_problem();
  {
    KernelSpec tuned = KernelSpec::backward_default_for_arch(Dtype::kBf16, 128, true, 4, kArch);
    tuned.block_m = 32;
    tuned.warps = 4;
    Database db(path("t.db"));
    put_winner_uri(db, workload_for(plain, StepType::kBwdDiagonal, device), tuned, 0.5, here);
  }
  std::vector<std::pair<std::string, Problem>> problems = {{"plain", plain}};
  const auto add = [&](const std::string& name, const std::function<void(Problem&)>& change) {
    Problem p = plain;
    change(p);
    p.validate();
    problems.emplace_back(name, p);
  };
  add("bshd", [](Problem& p) { p.layout = "bshd"; });
  add("softcap", [](Problem& p) { p.softcap = 30; });
  add("window", [](Problem& p) { p.window_left = 256; });
  add("causal right side only", [](Problem& p) { p.window_right = 0; });
  add("documents", [](Problem& p) { p.documents = {16384, 16384}; });
  add("full two-sided window", [](Problem& p) {
    p.causal = false;
    p.window_left = 128;
    p.window_right = 64;
  });
  for (const auto& [name, p] : problems) {
    const RingKernelSelection sel = select_ring_kernels(p, path("t.db"), kArch, 0);
    ASSERT_EQ(sel.backward_steps.size(), sel.steps.size()) << name;
    for (const auto* list : {&sel.steps, &sel.backward_steps})
      for (const StepSelection& s : *list) {
        EXPECT_EQ(s.selection.spec.key_intervals, kernel_needs_key_intervals(p)) << name << ": " << s.selection.spec.uri();
        EXPECT_EQ(s.selection.spec.softcap, kernel_needs_softcap(p)) << name << ": " << s.selection.spec.uri();
      }
    if (name == "window")
      EXPECT_EQ(sel.for_step(StepType::kBwdDiagonal).selection.spec.block_m, 32)
          << "the unmasked shape's tuned tiles, with the flags: " << sel.for_step(StepType::kBwdDiagonal).selection.reason;
  }
}

TEST_F(KernelSelectTest, StaleEnvironmentRowIsNotChosen) {
  const Problem p = zigzag_problem();
  const KernelSpec fast = non_default_candidates(p, kArch).at(0);
  const WorkloadKey diag = workload_for(p, StepType::kDiagonal, device);
  {
    Database db(path("t.db"));
    Environment stale = here.for_kernel(fast.uri());
    stale.template_hash = "0000000000000000";  // the kernel's code as older templates made it
    put_winner(db, diag, fast, 0.01, stale);
  }
  const RingKernelSelection sel = select_ring_kernels(p, path("t.db"), kArch, 0);
  ASSERT_TRUE(sel.database_used) << sel.database_note;
  const Selection& d = sel.steps.at(0).selection;
  EXPECT_NE(d.spec, fast);
  EXPECT_EQ(d.source, ConfigSource::kPretunedPattern) << d.reason;
  EXPECT_EQ(d.spec, forward_default_for_arch(Dtype::kBf16, 128, true, 4, kArch));
  EXPECT_EQ(d.ignored_other_environment, 1);
  EXPECT_NE(d.reason.find("another environment"), std::string::npos) << d.reason;
}

TEST_F(KernelSelectTest, WithoutADatabaseTheShippedCacheOrDefaultAnswersAndNothingIsCreated) {
  const Problem p = zigzag_problem();
  const KernelSpec def = forward_default_for_arch(Dtype::kBf16, 128, true, 4, kArch);
  RingKernelSelection sel = select_ring_kernels(p, path("absent.db"), kArch, 0);
  EXPECT_FALSE(sel.database_used);
  EXPECT_EQ(sel.database_note, "absent");
  EXPECT_FALSE(std::filesystem::exists(path("absent.db"))) << "selecting must not create a database";
  for (const StepSelection& s : sel.steps) {
    EXPECT_EQ(s.selection.source, ConfigSource::kPretunedPattern) << s.selection.reason;
    EXPECT_EQ(s.selection.spec, def);
    EXPECT_NE(s.selection.reason.find(path("absent.db") + " (absent)"), std::string::npos) << s.selection.reason;
  }
  // No shipped caches either: the documented default.
  sel = select_ring_kernels(p, path("absent.db"), kArch, 0, PretunedCaches{});
  EXPECT_EQ(sel.steps.at(0).selection.source, ConfigSource::kDefault);
  EXPECT_EQ(sel.steps.at(0).selection.spec, def);
  EXPECT_EQ(sel.steps.at(0).selection.origin, "forward_default_for_arch");
}

TEST_F(KernelSelectTest, DefaultPathComesFromCpgenDb) {
  const Problem p = zigzag_problem();
  const KernelSpec winner = non_default_candidates(p, kArch).at(0);
  {
    Database db(path("env.db"));
    put_winner(db, workload_for(p, StepType::kDiagonal, device), winner, 0.5, here);
  }
  const char* previous = std::getenv("CPGEN_DB");
  const std::string saved = previous ? previous : "";
  setenv("CPGEN_DB", path("env.db").c_str(), 1);
  const RingKernelSelection sel = select_ring_kernels(p, "", kArch, 0);
  if (previous) setenv("CPGEN_DB", saved.c_str(), 1); else unsetenv("CPGEN_DB");
  EXPECT_EQ(sel.database_path, path("env.db"));
  EXPECT_EQ(sel.steps.at(0).selection.spec, winner);
  EXPECT_EQ(sel.steps.at(0).selection.source, ConfigSource::kDatabaseExact);
}

TEST_F(KernelSelectTest, UnreadableDatabaseFallsBackWithTheReasonAndIsLeftAlone) {
  const Problem p = zigzag_problem();
  const std::string text = "this is not an SQLite file, and selection must not repair it\n";
  std::ofstream(path("bad.db")) << text;
  std::string warning;
  WarningSink previous = set_warning_sink([&](const std::string& w) { warning = w; });
  const RingKernelSelection sel = select_ring_kernels(p, path("bad.db"), kArch, 0);
  set_warning_sink(previous);
  EXPECT_FALSE(sel.database_used);
  EXPECT_EQ(sel.database_note.rfind("unreadable: ", 0), 0u) << sel.database_note;
  EXPECT_NE(warning.find(path("bad.db")), std::string::npos) << warning;
  EXPECT_EQ(sel.steps.at(0).selection.source, ConfigSource::kPretunedPattern);
  EXPECT_NE(sel.steps.at(0).selection.reason.find("unreadable"), std::string::npos) << sel.steps.at(0).selection.reason;
  // Still the same file, nothing moved aside or created next to it.
  std::ifstream in(path("bad.db"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), text);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 1);
}

// A selector opened while no writer had the file (a read without locks, cpgen explain over many
// shapes) and a tune that commits after the open: select() sees the tune's winner, read again
// through the writer's log. Before, it read the main file alone and answered with the default
// (or, overlapping the writer's checkpoint, rows of two commits or "damaged").
TEST_F(KernelSelectTest, ASelectorSeesAWinnerCommittedAfterItsOpen) {
  const Problem p = zigzag_problem();
  const KernelSpec winner = non_default_candidates(p, kArch).at(0);
  { Database created(path("t.db")); }
  ASSERT_FALSE(std::filesystem::exists(path("t.db-wal")));
  const RingKernelSelector selector(path("t.db"), kArch, 0);
  EXPECT_NE(selector.select(p).steps.at(0).selection.source, ConfigSource::kDatabaseExact);
  Database writer(path("t.db"));
  put_winner(writer, workload_for(p, StepType::kDiagonal, device), winner, 0.5, here);
  const RingKernelSelection sel = selector.select(p);
  EXPECT_TRUE(sel.database_used) << sel.database_note;
  EXPECT_EQ(sel.steps.at(0).selection.source, ConfigSource::kDatabaseExact) << sel.steps.at(0).selection.reason;
  EXPECT_EQ(sel.steps.at(0).selection.spec, winner) << sel.steps.at(0).selection.spec.uri();
}

// A row the selection cannot read (a damaged text column) is what an unreadable file is: the
// selection goes on without the database, warns naming it, and every step's reason says why.
// Before, select() threw, and RingAttention could not be made while a damaged row was in the file.
TEST_F(KernelSelectTest, ADamagedRowFallsBackWithTheReasonInsteadOfFailingTheSelection) {
  const Problem p = zigzag_problem();
  {
    Database db(path("t.db"));
    put_winner(db, workload_for(p, StepType::kDiagonal, device), non_default_candidates(p, kArch).at(0), 0.5, here);
    db.exec("UPDATE records SET samples_ms = 'garbage'");
  }
  std::string warning;
  int warnings = 0;
  WarningSink previous = set_warning_sink([&](const std::string& w) {
    warning = w;
    ++warnings;
  });
  RingKernelSelection sel;
  EXPECT_NO_THROW(sel = select_ring_kernels(p, path("t.db"), kArch, 0));
  // One selector for many problems (explain over a shapes file) reads the file no more after a
  // failed read, and says so once: each later selection carries the note.
  {
    const RingKernelSelector selector(path("t.db"), kArch, 0);
    warnings = 0;
    for (int i = 0; i < 3; ++i) {
      const RingKernelSelection again = selector.select(p);
      EXPECT_FALSE(again.database_used) << i;
      EXPECT_EQ(again.database_note.rfind("unreadable: ", 0), 0u) << again.database_note;
    }
    EXPECT_EQ(warnings, 1);
  }
  set_warning_sink(previous);
  EXPECT_FALSE(sel.database_used);
  EXPECT_EQ(sel.database_note.rfind("unreadable: ", 0), 0u) << sel.database_note;
  EXPECT_NE(sel.database_note.find("damaged"), std::string::npos) << sel.database_note;
  EXPECT_NE(warning.find(path("t.db")), std::string::npos) << warning;
  ASSERT_FALSE(sel.steps.empty());
  ASSERT_FALSE(sel.backward_steps.empty());
  for (const auto* list : {&sel.steps, &sel.backward_steps})
    for (const StepSelection& s : *list) {
      EXPECT_NE(s.selection.source, ConfigSource::kDatabaseExact) << s.selection.reason;
      EXPECT_NE(s.selection.reason.find("unreadable"), std::string::npos) << s.selection.reason;
    }
}

// A tile that fits Hopper's shared memory but not Ampere's, recorded for an sm_80 workload (an
// imported or hand-made row), is passed over rather than handed to the runtime to fail on.
TEST_F(KernelSelectTest, KernelInfeasibleOnTheWorkloadsArchIsNotSelected) {
  const Problem p = zigzag_problem();
  std::optional<KernelSpec> hopper_only;
  KernelSpec s = KernelSpec::default_for(Dtype::kBf16, 128, true, 4);
  for (int bn : {64, 128})
    for (int warps : {4, 8})
      for (int stages : {2, 3, 4}) {
        s.block_n = bn;
        s.warps = warps;
        s.stages = stages;
        try {
          s.validate();
        } catch (const Error&) {
          continue;
        }
        if (check_feasibility(s, "sm_90a").feasible && !check_feasibility(s, "sm_80").feasible) hopper_only = s;
      }
  ASSERT_TRUE(hopper_only) << "no tile of head dim 128 fits sm_90a but not sm_80";
  const DeviceClass ampere = device_class_for("sm_80", 0);
  const WorkloadKey diag = workload_for(p, StepType::kDiagonal, ampere);
  {
    Database db(path("t.db"));
    put_winner(db, diag, *hopper_only, 0.5, here);
  }
  const RingKernelSelection sel = select_ring_kernels(p, path("t.db"), "sm_80", 0);
  ASSERT_TRUE(sel.database_used) << sel.database_note;
  const Selection& d = sel.steps.at(0).selection;
  EXPECT_NE(d.spec, *hopper_only);
  EXPECT_TRUE(check_feasibility(d.spec, "sm_80").feasible) << d.spec.uri();
  EXPECT_NE(d.source, ConfigSource::kDatabaseExact) << d.reason;
  // On the arch it fits, the same kind of row is selected.
  {
    Database db(path("t.db"));
    put_winner(db, workload_for(p, StepType::kDiagonal, device), *hopper_only, 0.5, here);
  }
  EXPECT_EQ(select_ring_kernels(p, path("t.db"), kArch, 0).steps.at(0).selection.spec, *hopper_only);
}

// On a GPU: a ring whose step types run different tuned configs reports them and still matches
// the float64 reference (every config reads and writes the same running state).
TEST_F(KernelSelectTest, RingRunsThePerStepWinnersAndMatchesTheReference) {
  CPGEN_REQUIRE_GPU();
  Problem p;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 128;
  p.seq_len = 1024;
  p.cp_size = 4;  // zigzag: diagonal, kv-half and q-half steps
  const DeviceClass gpu = device_class_for("", 0);
  const std::vector<KernelSpec> specs = non_default_candidates(p, gpu.arch);
  ASSERT_GE(specs.size(), 3u);
  {
    Database db(path("ring.db"));
    put_winner(db, workload_for(p, StepType::kDiagonal, gpu), specs[0], 0.1, here);
    put_winner(db, workload_for(p, StepType::kZigzagKvHalf, gpu), specs[1], 0.1, here);
    put_winner(db, workload_for(p, StepType::kZigzagQHalf, gpu), specs[2], 0.1, here);
  }
  RingOptions options;
  options.database_path = path("ring.db");
  {
    RingAttention ring = RingAttention::loopback(p, options);
    EXPECT_EQ(ring.kernel_uri(), specs[0].uri());
    EXPECT_EQ(ring.config_source(), "database-exact") << ring.config_reason();
    ASSERT_EQ(ring.step_kernels().size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(ring.step_kernels()[i].kernel_uri, specs[i].uri()) << ring.step_kernels()[i].step_type;
      EXPECT_EQ(ring.step_kernels()[i].source, ConfigSource::kDatabaseExact);
    }
  }
  const std::vector<float> q = random_bf16_exact(p.q_heads * p.seq_len * p.head_dim, 21);
  const std::vector<float> k = random_bf16_exact(p.kv_heads * p.seq_len * p.head_dim, 22);
  const std::vector<float> v = random_bf16_exact(p.kv_heads * p.seq_len * p.head_dim, 23);
  AttentionShape shape{.batch = p.batch, .q_heads = p.q_heads, .kv_heads = p.kv_heads, .head_dim = p.head_dim, .scale = p.scale(), .causal = true};
  std::vector<int64_t> positions(p.seq_len);
  for (int64_t i = 0; i < p.seq_len; ++i) positions[i] = i;
  ReferenceForward ref = reference_forward(shape, to_double(q), to_double(k), to_double(v), positions, positions);
  gpu::GpuRingResult r = gpu::run_gpu_ring_loopback(p, q, k, v, options);
  expect_close_to(r.out, r.lse, ref.out, ref.lse, p.head_dim, "per-step winners, main kernel " + r.kernel_uri);
}

}  // namespace
}  // namespace cpgen::testing
