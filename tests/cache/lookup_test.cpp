#include <gtest/gtest.h>

#include <fstream>

#include "cache/database.h"
#include "cache/exchange.h"
#include "cache/lookup.h"
#include "cache/pretuned.h"
#include "cache/records.h"
#include "cache_fixtures.h"
#include "generator/kernel_spec_wgmma.h"
#include "runtime/ring/kernel_support.h"

namespace cpgen::testing {
namespace {

class LookupTest : public TempDirTest {
 protected:
  PretunedCaches no_caches;
  // A cache folder holding one file with the given document.
  PretunedCaches caches_with(const nlohmann::json& doc) {
    std::filesystem::create_directories(path("caches"));
    std::ofstream(path("caches/vendor.json")) << cache_text(doc);
    return load_pretuned_caches({path("caches")});
  }
};

TEST_F(LookupTest, ExactWorkloadWins) {
  Database db(path("l.db"));
  WorkloadKey w = test_workload();
  put_record(db, test_record(w, 128, 128, 8, 2, 0.9));
  put_record(db, test_record(w, 128, 64, 4, 2, 1.1));
  put_record(db, test_record(test_workload(8192), 64, 64, 4, 2, 0.1));
  Selection s = select_config(w, &db, test_env(), no_caches);
  EXPECT_EQ(s.source, ConfigSource::kDatabaseExact);
  EXPECT_EQ(s.spec.uri(), "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn128_w8_s2");
  EXPECT_EQ(s.median_ms, 0.9);
  EXPECT_EQ(s.origin, db.path());
}

TEST_F(LookupTest, NearestBucketWhenTheLengthWasNotTuned) {
  Database db(path("l.db"));
  put_record(db, test_record(test_workload(4096), 64, 64, 4, 2, 0.2));
  put_record(db, test_record(test_workload(65536), 128, 128, 8, 2, 3.0));
  put_record(db, test_record(test_workload(16384), 128, 64, 4, 3, 1.0));
  // 20000 rounds up to the 32768 bucket: 16384 is one power of two away, 65536 also one; the
  // tie goes to the shorter.
  Selection s = select_config(test_workload(20000), &db, test_env(), no_caches);
  EXPECT_EQ(s.source, ConfigSource::kDatabaseBucket);
  EXPECT_EQ(s.spec.uri(), "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s3");
  ASSERT_TRUE(s.matched);
  EXPECT_EQ(s.matched->q_len, 16384);
  Selection far = select_config(test_workload(131072), &db, test_env(), no_caches);
  EXPECT_EQ(far.source, ConfigSource::kDatabaseBucket);
  EXPECT_EQ(far.matched->q_len, 65536);
  // Another step type is another workload, never a bucket neighbour.
  Selection other_step = select_config(test_workload(16384, StepType::kZigzagKvHalf), &db, test_env(), no_caches);
  EXPECT_EQ(other_step.source, ConfigSource::kDefault);
}

TEST_F(LookupTest, StaleEnvironmentRowIsNotSelected) {
  Database db(path("l.db"));
  WorkloadKey w = test_workload();
  put_record(db, test_record(w, 64, 64, 4, 2, 0.01, Disposition::kOk, test_env("12.2")));
  Selection s = select_config(w, &db, test_env(), no_caches);
  EXPECT_EQ(s.source, ConfigSource::kDefault);
  EXPECT_EQ(s.spec, forward_default_for_arch(Dtype::kBf16, 128, true, 4, w.arch));
  EXPECT_EQ(s.ignored_other_environment, 1);
  EXPECT_NE(s.reason.find("another environment"), std::string::npos) << s.reason;
  EXPECT_EQ(records_for(db, w).size(), 1u);  // still there
  // Under the environment that made it, it is selected.
  EXPECT_EQ(select_config(w, &db, test_env("12.2"), no_caches).source, ConfigSource::kDatabaseExact);
}

TEST_F(LookupTest, PretunedCacheBeforeTheDefault) {
  Database vendor_db(path("vendor.db"));
  put_record(vendor_db, test_record(test_workload(16384), 128, 128, 8, 2, 0.8));
  nlohmann::json doc = export_cache(vendor_db);
  nlohmann::json defaults = default_heuristic_cache();
  for (auto& e : defaults["entries"]) doc["entries"].push_back(e);
  PretunedCaches caches = caches_with(doc);
  ASSERT_EQ(caches.files.size(), 1u);
  Database mine(path("mine.db"));
  Selection exact = select_config(test_workload(16384), &mine, test_env(), caches);
  EXPECT_EQ(exact.source, ConfigSource::kPretunedExact);
  EXPECT_EQ(exact.spec.uri(), "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn128_w8_s2");
  EXPECT_EQ(exact.origin, path("caches/vendor.json"));
  // A vendor's driver may differ from the user's: the same device and kernel code still match.
  EXPECT_EQ(select_config(test_workload(16384), &mine, test_env("13.1"), caches).source, ConfigSource::kPretunedExact);
  EXPECT_EQ(select_config(test_workload(32768), &mine, test_env(), caches).source, ConfigSource::kPretunedBucket);
  // Another GPU gets only the pattern entry.
  WorkloadKey a100 = test_workload(16384);
  a100.gpu_name = "NVIDIA A100-SXM4-80GB";
  a100.arch = "sm_80";
  a100.sm_count = 108;
  Environment a100_env = test_env();
  a100_env.gpu_name = a100.gpu_name;
  a100_env.sm_count = 108;
  Selection pattern = select_config(a100, &mine, a100_env, caches);
  EXPECT_EQ(pattern.source, ConfigSource::kPretunedPattern);
  EXPECT_EQ(pattern.spec, KernelSpec::default_for(Dtype::kBf16, 128, true, 4));
  // The user's own database comes first.
  put_record(mine, test_record(test_workload(16384), 64, 64, 4, 2, 0.85));
  EXPECT_EQ(select_config(test_workload(16384), &mine, test_env(), caches).source, ConfigSource::kDatabaseExact);
}

// A folder searched first ($CPGEN_CACHES_DIR) takes precedence for the same workload, though a
// later folder's entry is faster: the fastest of all folders was taken before.
TEST_F(LookupTest, AnEarlierCacheFolderTakesPrecedenceOverAFasterLaterOne) {
  const auto folder_with = [&](const std::string& name, int block_n, double ms) {
    Database db(path(name + ".db"));
    put_record(db, test_record(test_workload(16384), 128, block_n, 8, 2, ms));
    std::filesystem::create_directories(path(name));
    std::ofstream(path(name + "/" + name + ".json")) << cache_text(export_cache(db));
    return path(name);
  };
  const std::string site = folder_with("site", 64, 1.0), vendor = folder_with("vendor", 128, 0.5);
  Database mine(path("mine.db"));
  const Selection s =
      select_config(test_workload(16384), &mine, test_env(), load_pretuned_caches({site, vendor}));
  EXPECT_EQ(s.source, ConfigSource::kPretunedExact);
  EXPECT_EQ(s.origin, site + "/site.json");
  EXPECT_EQ(s.spec.uri(), "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w8_s2");
  // The other way round, the vendor's folder comes first.
  EXPECT_EQ(select_config(test_workload(16384), &mine, test_env(), load_pretuned_caches({vendor, site})).origin,
            vendor + "/vendor.json");
}

TEST_F(LookupTest, BrokenCacheFileIsSkippedWithAWarning) {
  std::filesystem::create_directories(path("caches"));
  std::ofstream(path("caches/broken.json")) << "{\"format\": \"cpgen-tuning-cache\", \"version\": 1, \"entries\": [";
  std::string warning;
  WarningSink previous = set_warning_sink([&](const std::string& w) { warning = w; });
  PretunedCaches caches = load_pretuned_caches({path("caches")});
  set_warning_sink(previous);
  EXPECT_TRUE(caches.files.empty());
  EXPECT_NE(warning.find("broken.json"), std::string::npos) << warning;
  EXPECT_EQ(select_config(test_workload(), nullptr, test_env(), caches).source, ConfigSource::kDefault);
}

TEST_F(LookupTest, ARecordForAnotherKernelShapeIsNeverUsed) {
  Database db(path("l.db"));
  WorkloadKey w = test_workload();
  Record wrong = test_record(w, 128, 64, 4, 2, 0.5);
  wrong.kernel_uri = "ring_fwd_fp16_hd64_causal_gqa4_bm128_bn64_w4_s2";  // not this workload's dtype/head dim
  put_record(db, wrong);
  EXPECT_EQ(select_config(w, &db, test_env(), no_caches).source, ConfigSource::kDefault);
}

// A backward kernel shares the forward's dtype, head dim, mask and group fields; a record naming
// one must still never be selected to run a forward step.
TEST_F(LookupTest, ARecordNamingABackwardKernelIsNeverUsedForTheForward) {
  Database db(path("l.db"));
  WorkloadKey w = test_workload();
  Record wrong = test_record(w, 128, 64, 4, 2, 0.5);
  KernelSpec bwd = KernelSpec::parse(wrong.kernel_uri);
  bwd.kind = KernelKind::kBackwardStep;
  bwd.block_m = 64;
  bwd.block_n = 64;
  bwd.warps = 8;
  wrong.kernel_uri = bwd.uri();
  ASSERT_TRUE(check_feasibility(bwd, w.arch).feasible) << wrong.kernel_uri;
  put_record(db, wrong);
  EXPECT_EQ(select_config(w, &db, test_env(), no_caches).source, ConfigSource::kDefault);
}

// A backward workload takes only backward kernels: a forward record of the same shape is never
// selected for it, its default is the backward default, and its own record wins.
TEST_F(LookupTest, ABackwardWorkloadSelectsOnlyBackwardKernels) {
  Database db(path("l.db"));
  const WorkloadKey fwd = test_workload();
  WorkloadKey bwd = fwd;
  bwd.step = backward_of(fwd.step);
  Record forward_record = test_record(fwd, 128, 64, 4, 2, 0.5);
  forward_record.workload = bwd;  // a damaged row: a forward kernel under a backward step type
  put_record(db, forward_record);
  Selection s = select_config(bwd, &db, test_env(), no_caches);
  EXPECT_EQ(s.source, ConfigSource::kDefault);
  EXPECT_EQ(s.spec, KernelSpec::backward_default_for(bwd.dtype, bwd.head_dim, bwd.causal, bwd.gqa_group()));
  EXPECT_EQ(s.spec.kind, KernelKind::kBackwardStep);

  Record backward_record = test_record(bwd, 128, 64, 4, 2, 0.3);  // faster than the damaged row
  KernelSpec tuned = KernelSpec::backward_default_for(bwd.dtype, bwd.head_dim, bwd.causal, bwd.gqa_group());
  tuned.stages = 1;
  ASSERT_TRUE(check_feasibility(tuned, bwd.arch).feasible) << tuned.uri();
  backward_record.kernel_uri = tuned.uri();
  put_record(db, backward_record);
  s = select_config(bwd, &db, test_env(), no_caches);
  EXPECT_EQ(s.spec, tuned);
  EXPECT_NE(s.source, ConfigSource::kDefault);
  // The forward workload still gets the forward default, not the backward record.
  EXPECT_EQ(select_config(fwd, &db, test_env(), no_caches).spec,
            forward_default_for_arch(fwd.dtype, fwd.head_dim, fwd.causal, fwd.gqa_group(), fwd.arch));
}

// The sm_90a wgmma family (issue 13): a record naming a ring_fwd_wgmma_ kernel is selected for a
// forward step like any other, faster record wins across families, and it is never used where
// it cannot run (off sm_90a, a backward step).
// The documented forward default on sm_90a is the wgmma family where a GPU has measured it faster
// (kWgmmaDefaultShapes): the shipped default-heuristic cache's entries naming the arch answer
// first there, and with no cache at all the lookup's last resort says the same. On sm_90, and for
// a combination not measured, the mma.sync default stays; a mask keeps the family, with its flags.
TEST_F(LookupTest, TheSm90aDefaultIsTheWgmmaFamilyWhereAGpuMeasuredIt) {
  const PretunedCaches shipped = load_pretuned_caches({std::string(CPGEN_SOURCE_DIR) + "/caches"});
  WorkloadKey w = test_workload();
  w.kv_heads = 32;  // group 1
  for (bool causal : {false, true}) {
    w.causal = causal;
    const KernelSpec wgmma = wgmma_default_for(Dtype::kBf16, 128, causal, 1);
    const Selection s = select_config(w, nullptr, test_env(), shipped);
    EXPECT_EQ(s.source, ConfigSource::kPretunedPattern) << s.reason;
    EXPECT_EQ(s.spec, wgmma) << s.spec.uri();
    const Selection none = select_config(w, nullptr, test_env(), no_caches);
    EXPECT_EQ(none.source, ConfigSource::kDefault) << none.reason;
    EXPECT_EQ(none.spec, wgmma) << none.spec.uri();
    EXPECT_EQ(none.origin, "forward_default_for_arch");

    WorkloadKey sm90 = w;
    sm90.arch = "sm_90";
    EXPECT_EQ(select_config(sm90, nullptr, test_env(), shipped).spec, KernelSpec::default_for(Dtype::kBf16, 128, causal, 1));
    EXPECT_EQ(select_config(sm90, nullptr, test_env(), no_caches).spec,
              KernelSpec::default_for_arch(Dtype::kBf16, 128, causal, 1, "sm_90"));
    WorkloadKey gqa2 = w;
    gqa2.kv_heads = 16;  // group 2: not timed on a GPU
    EXPECT_EQ(select_config(gqa2, nullptr, test_env(), shipped).spec.kind, KernelKind::kForwardStep);
    EXPECT_EQ(select_config(gqa2, nullptr, test_env(), no_caches).spec.kind, KernelKind::kForwardStep);
    // Every measured combination, from the shipped cache and without it.
    for (const WgmmaDefaultShape& shape : kWgmmaDefaultShapes) {
      WorkloadKey m = w;
      m.dtype = shape.dtype;
      m.head_dim = shape.head_dim;
      m.kv_heads = m.q_heads / shape.gqa_group;
      const KernelSpec expected = wgmma_default_for(shape.dtype, shape.head_dim, causal, shape.gqa_group);
      EXPECT_EQ(select_config(m, nullptr, test_env(), shipped).spec, expected) << expected.uri();
      EXPECT_EQ(select_config(m, nullptr, test_env(), no_caches).spec, expected) << expected.uri();
    }
  }
  WorkloadKey windowed = w;
  windowed.mask.window_left = 256;
  const Selection m = select_config(windowed, nullptr, test_env(), shipped);
  EXPECT_EQ(m.spec.kind, KernelKind::kForwardWgmma) << m.spec.uri();
  EXPECT_TRUE(m.spec.key_intervals) << m.spec.uri();
}

TEST_F(LookupTest, AWgmmaRecordIsSelectedLikeAnyOther) {
  Database db(path("l.db"));
  const WorkloadKey w = test_workload();
  ASSERT_EQ(w.arch, "sm_90a");
  put_record(db, test_record(w, 128, 64, 4, 2, 0.9));
  Record wgmma = test_record(w, 128, 64, 4, 2, 0.6);
  const KernelSpec spec = wgmma_default_for(w.dtype, w.head_dim, w.causal, w.gqa_group());
  wgmma.kernel_uri = spec.uri();
  put_record(db, wgmma);
  Selection s = select_config(w, &db, test_env(), no_caches);
  EXPECT_EQ(s.source, ConfigSource::kDatabaseExact);
  EXPECT_EQ(s.spec, spec);
  EXPECT_EQ(s.median_ms, 0.6);
  // The same rows on a GPU without sm_90a: the wgmma record is not usable, the mma.sync one is.
  WorkloadKey sm90 = w;
  sm90.arch = "sm_90";
  Record mma = test_record(sm90, 128, 64, 4, 2, 0.9);
  Record wgmma_sm90 = wgmma;
  wgmma_sm90.workload = sm90;
  put_record(db, mma);
  put_record(db, wgmma_sm90);
  s = select_config(sm90, &db, test_env(), no_caches);
  EXPECT_EQ(s.spec.kind, KernelKind::kForwardStep) << s.spec.uri();
  // A backward step never takes it.
  WorkloadKey bwd = w;
  bwd.step = backward_of(w.step);
  Record wgmma_bwd = wgmma;
  wgmma_bwd.workload = bwd;
  put_record(db, wgmma_bwd);
  EXPECT_EQ(select_config(bwd, &db, test_env(), no_caches).spec.kind, KernelKind::kBackwardStep);
}

// A masked workload never tuned with its mask takes the unmasked shape's config with the mask's
// flags. A wgmma winner keeps its family (it has masked kernels, runtime/ring/kernel_support.h);
// were the family without them, the documented default (mma.sync) would stand in, flagged.
TEST_F(LookupTest, AMaskedWorkloadDoesNotInheritAWgmmaWinnerItsFamilyCannotMask) {
  Database db(path("l.db"));
  const WorkloadKey w = test_workload();
  Record wgmma = test_record(w, 128, 64, 4, 2, 0.6);
  wgmma.kernel_uri = wgmma_default_for(w.dtype, w.head_dim, w.causal, w.gqa_group()).uri();
  put_record(db, wgmma);
  WorkloadKey masked = w;
  masked.mask.window_left = 256;
  const Selection s = select_config(masked, &db, test_env(), no_caches);
  if (kernel_family_abilities(KernelKind::kForwardWgmma).key_intervals) {
    EXPECT_EQ(s.spec.kind, KernelKind::kForwardWgmma);
  } else {
    EXPECT_EQ(s.spec.kind, KernelKind::kForwardStep) << s.spec.uri();
    EXPECT_EQ(s.source, ConfigSource::kDefault);
    EXPECT_TRUE(s.spec.key_intervals);
    EXPECT_NE(s.reason.find("has no kernel with this mask"), std::string::npos) << s.reason;
    EXPECT_NO_THROW(s.spec.validate());
  }
}

// A pattern's GQA group is compared as the number it is: 4294967297 read as an int wrapped to 1
// and matched every GQA-1 workload (a fuzzer's pattern entry chose its kernel for them).
TEST(PatternMatches, AGqaGroupPastIntRangeMatchesNothing) {
  WorkloadKey w = test_workload(16384);
  w.q_heads = w.kv_heads;  // GQA 1
  ASSERT_EQ(w.gqa_group(), 1);
  EXPECT_TRUE(pattern_matches(nlohmann::json{{"gqa_group", 1}}, w));
  EXPECT_FALSE(pattern_matches(nlohmann::json{{"gqa_group", 4294967297LL}}, w));
  EXPECT_FALSE(pattern_matches(nlohmann::json{{"gqa_group", 2}}, w));
}

}  // namespace
}  // namespace cpgen::testing
