// Workloads that carry a mask (window, documents, softcap): the key, its text and JSON forms,
// how the database files them apart from unmasked ones, how rows and files written before masks
// existed read back, and the lookup order for a masked workload (cache/lookup.h).
#include <gtest/gtest.h>

#include "cache/database.h"
#include "cache/exchange.h"
#include "cache/lookup.h"
#include "cache/records.h"
#include "cache_fixtures.h"
#include "cpgen/error.h"
#include "generator/kernel_spec.h"
#include "runtime/ring/kernel_support.h"
#include "test_util.h"

namespace cpgen::testing {
namespace {

class WorkloadMaskTest : public TempDirTest {
 protected:
  PretunedCaches no_caches;
};

WorkloadMask window_softcap() {
  WorkloadMask m;
  m.window_left = 256;
  m.softcap = true;
  return m;
}

WorkloadKey masked_workload(int64_t q_len = 16384) {
  WorkloadKey w = test_workload(q_len);
  w.mask = window_softcap();
  return w;
}

// A record of w whose kernel carries w's mask flags, as the tuner files it.
Record masked_record(const WorkloadKey& w, int bm, int bn, double ms) {
  Record r = test_record(w, bm, bn, 4, 2, ms);
  KernelSpec s = KernelSpec::parse(r.kernel_uri);
  s.key_intervals = w.mask.key_intervals();
  s.softcap = w.mask.softcap;
  r.kernel_uri = s.uri();
  return r;
}

TEST(WorkloadMask, ProblemMaskKeysWindowsDocumentLengthAndSoftcap) {
  Problem p;
  p.q_heads = p.kv_heads = 8;
  p.head_dim = 128;
  p.seq_len = 4096;
  p.causal = true;
  EXPECT_FALSE(workload_mask_of(p).any());
  p.window_left = 128;
  p.window_right = 7;  // moot under causal: keyed as -1, as 0 or none would be
  p.softcap = 30;
  // Empty documents do not count; the mean of 1000, 3000 and 96 is 1366, keyed as 2048.
  p.documents = {1000, 0, 3000, 96};
  const WorkloadMask m = workload_mask_of(p);
  EXPECT_EQ(m.window_left, 128);
  EXPECT_EQ(m.window_right, -1);
  EXPECT_EQ(m.document_len, 2048);
  EXPECT_TRUE(m.softcap);
  EXPECT_TRUE(m.key_intervals());
  EXPECT_EQ(m.name(), "window=128,-1 doc-len=2048 softcap");
  // Without causal the right side is a bound of its own and stays.
  Problem full = p;
  full.causal = false;
  EXPECT_EQ(workload_mask_of(full).name(), "window=128,7 doc-len=2048 softcap");
  // A softcap alone needs no key intervals.
  Problem capped;
  capped.softcap = 50;
  EXPECT_FALSE(workload_mask_of(capped).key_intervals());
  EXPECT_TRUE(workload_mask_of(capped).any());
  // The flags are always the ones the runtime passes tables and a cap for.
  Problem right_only;  // causal: no mask at all
  right_only.window_right = 4;
  EXPECT_FALSE(workload_mask_of(right_only).any());
  Problem full_right_only = right_only;
  full_right_only.causal = false;
  Problem two_documents;
  two_documents.documents = {0, 4096};
  for (const Problem& q : {p, full, capped, right_only, full_right_only, two_documents, Problem{}}) {
    EXPECT_EQ(workload_mask_of(q).key_intervals(), kernel_needs_key_intervals(q)) << workload_mask_of(q).name();
    EXPECT_EQ(workload_mask_of(q).softcap, kernel_needs_softcap(q)) << workload_mask_of(q).name();
  }
}

TEST(WorkloadMask, NameParsesBackExactlyAndBadTokensAreNamed) {
  for (const char* text : {"window=128,-1 doc-len=2048 softcap", "window=-1,64", "doc-len=1", "softcap", ""}) {
    EXPECT_EQ(parse_workload_mask(text).name(), text);
  }
  for (const char* text : {"window=128", "doc-len=1000", "softcap window=1,1", "window=-1,-1", "cap", "window=1,x"}) {
    try {
      parse_workload_mask(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << text;
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  }
}

TEST(WorkloadMask, JsonWithoutMaskFieldsReadsAsUnmaskedAndMaskedRoundTrips) {
  const WorkloadKey plain = test_workload();
  const nlohmann::json plain_json = plain.to_json();
  EXPECT_FALSE(plain_json.contains("window_left")) << "unmasked JSON keeps the format-1 fields only";
  EXPECT_FALSE(WorkloadKey::from_json(plain_json).mask.any());
  const WorkloadKey masked = masked_workload();
  const nlohmann::json j = masked.to_json();
  EXPECT_EQ(j.at("window_left"), 256);
  EXPECT_EQ(j.at("softcap"), true);
  EXPECT_EQ(WorkloadKey::from_json(j), masked);
  EXPECT_NE(masked.describe().find(" mask window=256,-1 softcap on "), std::string::npos) << masked.describe();
  nlohmann::json bad = j;
  bad["document_len"] = 1000;
  EXPECT_THROW(WorkloadKey::from_json(bad), Error);
}

// The export golden was written before masks existed: imported, its workload is unmasked.
TEST_F(WorkloadMaskTest, OldExchangeFileReadsAsUnmasked) {
  Database db(path("old.db"));
  const nlohmann::json golden = load_json(std::string(CPGEN_SOURCE_DIR) + "/tests/cache/golden/export_v1.json");
  import_cache(db, golden, "export_v1.json");
  const std::vector<WorkloadKey> all = all_workloads(db);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_FALSE(all[0].mask.any());
  EXPECT_EQ(all[0], test_workload());
}

// A row as a cpgen before masks wrote it (the bare step type) is the unmasked workload, and a
// masked workload of the same shape is a row of its own that unmasked lookups never see.
TEST_F(WorkloadMaskTest, MaskedRowsAreApartFromOldUnmaskedRows) {
  Database db(path("m.db"));
  db.exec("INSERT INTO workloads (dtype, head_dim, q_heads, kv_heads, gqa_group, causal, batch, q_len, kv_len, seq_bucket, "
          "scheme, step_type, gpu_name, arch, sm_count) SELECT '" + std::string(dtype_name(test_workload().dtype)) +
          "', 128, 32, 8, 4, 1, 1, 16384, 16384, 16384, 'zigzag', 'diagonal', '" + test_workload().gpu_name + "', '" +
          test_workload().arch + "', " + std::to_string(test_workload().sm_count));
  ASSERT_EQ(all_workloads(db).size(), 1u);
  EXPECT_EQ(all_workloads(db)[0], test_workload());

  const WorkloadKey masked = masked_workload();
  put_record(db, masked_record(masked, 64, 64, 0.5));
  const std::vector<WorkloadKey> all = all_workloads(db);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1], masked);
  EXPECT_TRUE(records_for(db, test_workload()).empty());
  ASSERT_EQ(records_for(db, masked).size(), 1u);
  EXPECT_EQ(records_for(db, masked)[0].workload.mask, window_softcap());
  // An unmasked lookup, exact or by bucket, does not take the masked record.
  const Selection plain = select_config(test_workload(), &db, test_env(), no_caches);
  EXPECT_EQ(plain.source, ConfigSource::kDefault) << plain.reason;
  EXPECT_FALSE(plain.spec.key_intervals || plain.spec.softcap);
  EXPECT_EQ(select_config(test_workload(20000), &db, test_env(), no_caches).source, ConfigSource::kDefault);
}

TEST_F(WorkloadMaskTest, MaskedLookupPrefersTheMaskedRecordThenFallsBackToTheUnmaskedShape) {
  Database db(path("l.db"));
  put_record(db, test_record(test_workload(), 128, 128, 8, 2, 0.9));
  // Only the unmasked shape was tuned: its tile, specialized on the mask, and the reason says so.
  const WorkloadKey masked = masked_workload();
  Selection fallback = select_config(masked, &db, test_env(), no_caches);
  EXPECT_EQ(fallback.source, ConfigSource::kDatabaseExact);
  EXPECT_EQ(fallback.spec.uri(), "ring_fwd_bf16_hd128_causal_ivl_cap_gqa4_bm128_bn128_w8_s2");
  EXPECT_NE(fallback.reason.find("no record for the masked workload (window=256,-1 softcap)"), std::string::npos)
      << fallback.reason;
  // Once the masked workload is tuned, its own record wins, at the exact length or by bucket.
  put_record(db, masked_record(masked, 64, 64, 0.5));
  Selection tuned = select_config(masked, &db, test_env(), no_caches);
  EXPECT_EQ(tuned.source, ConfigSource::kDatabaseExact);
  EXPECT_EQ(tuned.spec.uri(), "ring_fwd_bf16_hd128_causal_ivl_cap_gqa4_bm64_bn64_w4_s2");
  EXPECT_NE(tuned.reason.find("masked workload (window=256,-1 softcap) tuned for this exact workload"), std::string::npos)
      << tuned.reason;
  Selection bucket = select_config(masked_workload(20000), &db, test_env(), no_caches);
  EXPECT_EQ(bucket.source, ConfigSource::kDatabaseBucket);
  EXPECT_EQ(bucket.spec.uri(), tuned.spec.uri());
  // Another mask is another workload: it falls back to the unmasked shape.
  WorkloadKey other = masked;
  other.mask.window_left = 512;
  EXPECT_EQ(select_config(other, &db, test_env(), no_caches).spec.uri(),
            "ring_fwd_bf16_hd128_causal_ivl_cap_gqa4_bm128_bn128_w8_s2");
}

}  // namespace
}  // namespace cpgen::testing
