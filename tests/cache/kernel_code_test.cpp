// Tuning records and compiled kernels follow each kernel's own code: its rendered source and the
// templates it includes, not the whole template set (jit.h kernel_code_hash, cache/environment.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cache/database.h"
#include "cache/environment.h"
#include "cache/exchange.h"
#include "cache/lookup.h"
#include "cache/pretuned.h"
#include "cache/records.h"
#include "cache_fixtures.h"
#include "generator/kernel_spec_wgmma.h"
#include "generator/render.h"
#include "generator/template_files.h"
#include "runtime/jit/jit.h"
#include "test_util.h"

namespace cpgen::testing {
namespace {

std::vector<std::string> names_of(const std::vector<EmbeddedTemplate>& templates) {
  std::vector<std::string> names;
  for (const EmbeddedTemplate& t : templates) names.push_back(t.name);
  return names;
}

bool holds(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(IncludedTemplates, FollowsIncludesThroughTemplatesWhateverSurroundsThem) {
  const std::string a = "#pragma once\n#if defined(X)\n#include \"cpgen/b.cuh\"\n#endif\n// #include \"cpgen/e.cuh\"\n";
  const std::string b = "  #  include \"cpgen/c.cuh\"  // spaced\n#include <cstdint>\n";
  const std::string c = "#include \"cpgen/a.cuh\"\n#include \"cpgen/absent.cuh\"\n";  // a cycle back to a
  const std::string d = "int d;\n";
  const std::string e = "int e;\n";
  const std::vector<EmbeddedTemplate> set = {{"cpgen/a.cuh", a.c_str(), a.size()},
                                             {"cpgen/b.cuh", b.c_str(), b.size()},
                                             {"cpgen/c.cuh", c.c_str(), c.size()},
                                             {"cpgen/d.cuh", d.c_str(), d.size()},
                                             {"cpgen/e.cuh", e.c_str(), e.size()}};
  EXPECT_EQ(names_of(included_templates("#include \"cpgen/a.cuh\"\nint main();\n", set)),
            (std::vector<std::string>{"cpgen/a.cuh", "cpgen/b.cuh", "cpgen/c.cuh"}));
  EXPECT_EQ(names_of(included_templates("#include \"cpgen/d.cuh\"", set)), (std::vector<std::string>{"cpgen/d.cuh"}));
  EXPECT_TRUE(included_templates("int x; // #include \"cpgen/a.cuh\"\n", set).empty());
  // NVRTC finds a template named in angle brackets among the program's headers too: it counts
  // (it was left out of the keys, so an edit of it served the stale kernel from the store).
  EXPECT_EQ(names_of(included_templates("#include <cpgen/d.cuh>\n#include <cstdint>\n", set)),
            (std::vector<std::string>{"cpgen/d.cuh"}));
}

// flatten_includes inlines each template where it is included, inside a guard of its own, so the
// preprocessor reads it once whatever #if surrounds the include (b's first include sits in an #if
// that may be false; its second is read wherever the first was not); a template that includes
// itself back through another is left out there, as #pragma once does; other includes stay, and
// no #pragma once is left in the one file.
TEST(FlattenIncludes, InlinesEachTemplateOnceUnderAGuardAndLeavesOtherIncludes) {
  const std::string a = "#pragma once\n#if defined(X)\n#include \"cpgen/b.cuh\"\n#endif\nint a;\n#include \"cpgen/b.cuh\"\n";
  const std::string b = "#pragma once\n#include <cstdint>\n#include \"cpgen/a.cuh\"\nint b;\n";
  const std::vector<EmbeddedTemplate> set = {{"cpgen/a.cuh", a.c_str(), a.size()}, {"cpgen/b.cuh", b.c_str(), b.size()}};
  const std::string flat = flatten_includes("#include <cpgen/a.cuh>\nint main();\n", set);
  EXPECT_EQ(flat,
            "// ---- cpgen/a.cuh ----\n#ifndef CPGEN_FLAT_CPGEN_A_CUH\n#define CPGEN_FLAT_CPGEN_A_CUH\n"
            "#if defined(X)\n"
            "// ---- cpgen/b.cuh ----\n#ifndef CPGEN_FLAT_CPGEN_B_CUH\n#define CPGEN_FLAT_CPGEN_B_CUH\n"
            "#include <cstdint>\nint b;\n#endif  // CPGEN_FLAT_CPGEN_B_CUH\n"
            "#endif\nint a;\n"
            "// ---- cpgen/b.cuh ----\n#ifndef CPGEN_FLAT_CPGEN_B_CUH\n#define CPGEN_FLAT_CPGEN_B_CUH\n"
            "#include <cstdint>\nint b;\n#endif  // CPGEN_FLAT_CPGEN_B_CUH\n"
            "#endif  // CPGEN_FLAT_CPGEN_A_CUH\n"
            "int main();\n");
  EXPECT_TRUE(include_names(flatten_includes("#include \"cpgen/b.cuh\"\n", set)) == std::vector<std::string_view>{"cstdint"});
}

// The families share the common templates and keep their own apart: an edit of the backward
// leaves the forward kernels' keys and records alone, and the reverse.
TEST(IncludedTemplates, EachFamilyIncludesItsOwnStepAndNotTheOthers) {
  const auto closure = [](const KernelSpec& spec) {
    return names_of(included_templates(render_source(spec), template_files()));
  };
  const std::vector<std::string> fwd = closure(KernelSpec::default_for(Dtype::kBf16, 128, true, 4));
  const std::vector<std::string> wgmma = closure(wgmma_default_for(Dtype::kBf16, 128, true, 4));
  const std::vector<std::string> bwd = closure(KernelSpec::backward_default_for(Dtype::kBf16, 128, true, 4));
  for (const char* common : {"cpgen/platform.cuh", "cpgen/softmax.cuh", "cpgen/mask.cuh", "cpgen/params.cuh"}) {
    EXPECT_TRUE(holds(fwd, common)) << common;
    EXPECT_TRUE(holds(wgmma, common)) << common;
  }
  EXPECT_TRUE(holds(fwd, "cpgen/step_fwd.cuh"));
  EXPECT_TRUE(holds(wgmma, "cpgen/step_fwd_wgmma.cuh"));
  EXPECT_TRUE(holds(wgmma, "cpgen/hopper.cuh"));
  EXPECT_TRUE(holds(bwd, "cpgen/step_bwd.cuh"));
  for (const char* other : {"cpgen/step_fwd_wgmma.cuh", "cpgen/hopper.cuh", "cpgen/step_bwd.cuh", "cpgen/traits_bwd.cuh"})
    EXPECT_FALSE(holds(fwd, other)) << other;
  for (const char* other : {"cpgen/step_fwd_wgmma.cuh", "cpgen/hopper.cuh", "cpgen/step_fwd.cuh"})
    EXPECT_FALSE(holds(bwd, other)) << other;
  EXPECT_FALSE(holds(wgmma, "cpgen/step_bwd.cuh"));
}

TEST(KernelCodeHash, IsOneKernelsAndStable) {
  const KernelSpec a = KernelSpec::default_for(Dtype::kBf16, 128, true, 4);
  KernelSpec b = a;
  b.stages = 3;
  const std::string ha = kernel_code_hash(a);
  EXPECT_EQ(ha.size(), 16u);
  EXPECT_EQ(ha.find_first_not_of("0123456789abcdef"), std::string::npos) << ha;
  EXPECT_EQ(ha, kernel_code_hash(a));
  EXPECT_NE(ha, kernel_code_hash(b));
}

TEST(KernelCodeHash, ThisBuildsEnvironmentStampsEachKernelWithItsOwn) {
  const Environment here = current_environment();
  EXPECT_TRUE(here.per_kernel);
  const KernelSpec fwd = KernelSpec::default_for(Dtype::kBf16, 128, true, 4);
  const Environment stamped = here.for_kernel(fwd.uri());
  EXPECT_FALSE(stamped.per_kernel);
  EXPECT_EQ(stamped.template_hash, kernel_code_hash(fwd));
  EXPECT_EQ(stamped.driver_version, here.driver_version);
  EXPECT_TRUE(stamped.matches(here.for_kernel(fwd.uri())));
  // A record stamped with the whole template set's hash (before records were per kernel) is of
  // another environment; so is one of another kernel.
  Environment whole_set = stamped;
  whole_set.template_hash = "89735f41fbf7a737";  // the template set's hash of the 2026-11-28 H200 tune
  EXPECT_FALSE(whole_set.matches(here.for_kernel(fwd.uri())));
  EXPECT_FALSE(here.for_kernel(wgmma_default_for(Dtype::kBf16, 128, true, 4).uri()).matches(stamped));
  // A URI that names no kernel matches no record; a fixed environment is left as it is.
  EXPECT_NE(here.for_kernel("ring_fwd_nonsense").template_hash, stamped.template_hash);
  EXPECT_EQ(test_env().for_kernel(fwd.uri()), test_env());
}

class KernelCodeRecords : public TempDirTest {
 protected:
  // test_env with the code of another template revision.
  static Environment older_code() {
    Environment e = test_env();
    e.template_hash = "ffeeddccbbaa9988";
    return e;
  }
};

// The winner tune pinned was timed here on code that has changed since: the workload's other
// records lost to it, so none of them answers (the default does) until a tune runs again.
TEST_F(KernelCodeRecords, AChangedWinnerRetiresItsWorkload) {
  Database db(path("r.db"));
  const WorkloadKey w = test_workload();
  const Record winner = test_record(w, 128, 128, 8, 2, 0.5, Disposition::kOk, older_code());
  put_record(db, winner);
  put_record(db, test_record(w, 128, 64, 4, 3, 1.0));  // unchanged code, slower
  db.transaction([&] { pin_winner(db, w, {winner.kernel_uri, 0.5, winner.env.key(), "tune"}); });
  const BestRecord best = best_record(db, w, test_env());
  EXPECT_FALSE(best.record) << best.record->kernel_uri;
  EXPECT_TRUE(best.winner_changed);
  EXPECT_EQ(best.other_environment, 1);
  const Selection s = select_config(w, &db, test_env(), PretunedCaches{});
  EXPECT_EQ(s.source, ConfigSource::kDefault);
  EXPECT_NE(s.reason.find("winner's kernel has changed"), std::string::npos) << s.reason;
  // Under the code it was timed on, the workload answers with its winner.
  EXPECT_EQ(best_record(db, w, older_code()).record->kernel_uri, winner.kernel_uri);
  // verify counts it among the other environments' records, as timed on this setup.
  const VerifyReport report = verify_database(db, test_env());
  EXPECT_EQ(report.other_environment, 1);
  EXPECT_EQ(report.changed_code, 1);
  ASSERT_EQ(report.by_environment.size(), 1u);
  EXPECT_EQ(report.by_environment[0].first, test_env().setup_key());
}

// A winner pinned under another driver says nothing about this one's kernels: this
// environment's own records still answer, as does a workload whose changed kernel lost.
TEST_F(KernelCodeRecords, ALoserChangedOrAWinnerOfAnotherDriverKeepsTheWorkload) {
  Database db(path("r.db"));
  const WorkloadKey w = test_workload();
  const Record winner = test_record(w, 128, 128, 8, 2, 0.5);
  put_record(db, winner);
  put_record(db, test_record(w, 128, 64, 4, 3, 1.0, Disposition::kOk, older_code()));
  db.transaction([&] { pin_winner(db, w, {winner.kernel_uri, 0.5, winner.env.key(), "tune"}); });
  BestRecord best = best_record(db, w, test_env());
  ASSERT_TRUE(best.record);
  EXPECT_EQ(best.record->kernel_uri, winner.kernel_uri);
  EXPECT_FALSE(best.winner_changed);

  const WorkloadKey v = test_workload(8192);
  Environment other_driver = older_code();
  other_driver.driver_version = "12.8";
  const Record elsewhere = test_record(v, 128, 128, 8, 2, 0.5, Disposition::kOk, other_driver);
  put_record(db, elsewhere);
  const Record mine = test_record(v, 128, 64, 4, 3, 1.0);
  put_record(db, mine);
  db.transaction([&] { pin_winner(db, v, {elsewhere.kernel_uri, 0.5, elsewhere.env.key(), "tune"}); });
  best = best_record(db, v, test_env());
  ASSERT_TRUE(best.record);
  EXPECT_EQ(best.record->kernel_uri, mine.kernel_uri);
  EXPECT_FALSE(best.winner_changed);
}

// The same rule in a shipped cache: a workload whose winner entry was timed on this GPU on code
// that has changed since falls through to the default, while a changed loser leaves it alone.
TEST_F(KernelCodeRecords, AShippedCachesChangedWinnerRetiresItsWorkload) {
  const WorkloadKey w = test_workload();
  const auto cache_of = [&](bool change_winner) {
    Database vendor(path(change_winner ? "v1.db" : "v2.db"));
    const Record winner = test_record(w, 128, 128, 8, 2, 0.5, Disposition::kOk, change_winner ? older_code() : test_env());
    put_record(vendor, winner);
    put_record(vendor, test_record(w, 128, 64, 4, 3, 0.75, Disposition::kOk, change_winner ? test_env() : older_code()));
    vendor.transaction([&] { pin_winner(vendor, w, {winner.kernel_uri, 0.5, winner.env.key(), "tune"}); });
    const nlohmann::json doc = export_cache(vendor);
    const std::string dir = path(change_winner ? "caches1" : "caches2");
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/vendor.json") << cache_text(doc);
    return load_pretuned_caches({dir});
  };
  const Selection retired = select_config(w, nullptr, test_env(), cache_of(true));
  EXPECT_EQ(retired.source, ConfigSource::kDefault) << retired.reason;
  const Selection kept = select_config(w, nullptr, test_env(), cache_of(false));
  EXPECT_EQ(kept.source, ConfigSource::kPretunedExact) << kept.reason;
  EXPECT_EQ(kept.spec.uri(), "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn128_w8_s2");
}

// A changed winner retires its workload in its own folder only: a site folder whose winner was
// timed on older code no longer answers, and the vendor folder after it, timed on this code,
// does (before, the first folder's changed winner retired the workload in every folder).
TEST_F(KernelCodeRecords, AChangedWinnerRetiresItsWorkloadInItsOwnFolderOnly) {
  const WorkloadKey w = test_workload();
  const auto folder = [&](const std::string& name, const Environment& env, int block_n) {
    Database db(path(name + ".db"));
    const Record winner = test_record(w, 128, block_n, 8, 2, 0.5, Disposition::kOk, env);
    put_record(db, winner);
    db.transaction([&] { pin_winner(db, w, {winner.kernel_uri, 0.5, winner.env.key(), "tune"}); });
    std::filesystem::create_directories(path(name));
    std::ofstream(path(name + "/" + name + ".json")) << cache_text(export_cache(db));
    return path(name);
  };
  const std::string site = folder("site", older_code(), 128), vendor = folder("vendor", test_env(), 64);
  const Selection s = select_config(w, nullptr, test_env(), load_pretuned_caches({site, vendor}));
  EXPECT_EQ(s.source, ConfigSource::kPretunedExact) << s.reason;
  EXPECT_EQ(s.origin, vendor + "/vendor.json") << s.reason;
  EXPECT_EQ(s.spec.uri(), "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w8_s2");
}

// The kernel store's key and the code hash change with a template the kernel includes and with
// no other: a copy of the templates with the wgmma step edited serves the backward
// preprocessing kernel from the store; one with a header it includes edited compiles anew.
class KernelCodeStore : public TempDirTest {
 protected:
  std::string templates_with(const std::string& dir, const std::string& edited) {
    std::filesystem::create_directories(path(dir));
    for (const EmbeddedTemplate& t : embedded_templates()) {
      const std::string name = std::filesystem::path(t.name).filename().string();
      std::ofstream out(path(dir) + "/" + name, std::ios::binary);
      out.write(t.contents, static_cast<std::streamsize>(t.size));
      if (t.name == edited) out << "\n// an edit\n";
    }
    return path(dir);
  }
  nlohmann::json compile(const std::string& uri) {
    CliResult r = run_cli("compile --spec " + uri + " --arch sm_90 --json --store " + path("store"));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  }
};

TEST_F(KernelCodeStore, KeysFollowOnlyTheTemplatesAKernelIncludes) {
  const KernelSpec pre = KernelSpec::backward_pre(Dtype::kFp16, 64);
  const std::vector<std::string> used = names_of(included_templates(render_source(pre), template_files()));
  ASSERT_FALSE(holds(used, "cpgen/step_fwd_wgmma.cuh"));
  ASSERT_TRUE(holds(used, "cpgen/platform.cuh"));
  const nlohmann::json first = compile(pre.uri());
  ASSERT_TRUE(first.contains("key"));
  EXPECT_EQ(first["code_hash"], kernel_code_hash(pre));
  {
    ScopedEnv dir("CPGEN_TEMPLATES_DIR", templates_with("unrelated", "cpgen/step_fwd_wgmma.cuh").c_str());
    const nlohmann::json again = compile(pre.uri());
    EXPECT_EQ(again["key"], first["key"]);
    EXPECT_EQ(again["code_hash"], first["code_hash"]);
    EXPECT_EQ(again["from_store"], true);
  }
  {
    ScopedEnv dir("CPGEN_TEMPLATES_DIR", templates_with("included", "cpgen/platform.cuh").c_str());
    const nlohmann::json changed = compile(pre.uri());
    EXPECT_NE(changed["key"], first["key"]);
    EXPECT_NE(changed["code_hash"], first["code_hash"]);
    EXPECT_EQ(changed["from_store"], false);
  }
}

}  // namespace
}  // namespace cpgen::testing
