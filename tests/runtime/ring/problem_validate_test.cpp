// Problem::validate refuses problems beyond what the step kernels support, at construction and
// naming the field and its limit, so that none of them fails only at its first launch.
#include <gtest/gtest.h>

#include <string>

#include "cpgen/error.h"
#include "cpgen/problem.h"
#include "runtime/core/problem_limits.h"
#include "runtime/ring/kernel_support.h"

namespace cpgen {
namespace {

Problem base() {
  Problem p;
  p.batch = 1;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 128;
  p.seq_len = 4096;
  p.cp_size = 4;
  return p;
}

// Expects validate() to throw kBadInput whose message holds every one of `words`.
void expect_refused(const Problem& p, std::initializer_list<const char*> words) {
  try {
    p.validate();
    ADD_FAILURE() << "accepted batch " << p.batch << ", q_heads " << p.q_heads << ", kv_heads "
                  << p.kv_heads << ", seq_len " << p.seq_len << ", cp_size " << p.cp_size;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
    for (const char* w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << w << " in: " << e.what();
  }
}

TEST(ProblemLimits, BaseProblemIsAccepted) { EXPECT_NO_THROW(base().validate()); }

// The (batch, kv head) pair index of the step kernels is int32: the batch and head limits keep
// every pair count far inside it, and a value past its limit is refused naming the field.
TEST(ProblemLimits, BatchAndHeadsAboveTheirLimitsAreRefused) {
  static_assert(kMaxBatch * kMaxHeads < (int64_t{1} << 31) - 1, "pair index fits int32");
  Problem p = base();
  p.batch = kMaxBatch + 1;
  expect_refused(p, {"batch", "1..65536"});
  p.batch = kMaxBatch;
  EXPECT_NO_THROW(p.validate());
  p = base();
  p.kv_heads = 128;
  p.q_heads = 2048;  // group 16
  expect_refused(p, {"q_heads", "1..1024"});
}

// Above 65535 pairs is fine: the grid folds them (StepGrid and FoldPairs tests).
TEST(ProblemLimits, BatchTimesKvHeadsAbove65535IsAccepted) {
  Problem p = base();
  p.batch = 8192;
  p.q_heads = 64;
  p.kv_heads = 16;
  EXPECT_NO_THROW(p.validate());
}

TEST(ProblemLimits, PackedQueryRowsAbove2To30AreRefused) {
  Problem p = base();
  p.seq_len = int64_t{1} << 29;
  p.cp_size = 1;
  p.kv_heads = 1;
  p.q_heads = 4;  // 2^29 rows x group 4 = 2^31 packed rows
  expect_refused(p, {"rank 0 holds 536870912 tokens", "GQA group 4", "2^30"});
  p.q_heads = 2;  // exactly 2^30
  EXPECT_NO_THROW(p.validate());
  p.q_heads = 4;
  p.cp_size = 2;  // the rank holds half the rows: 2^30 packed rows
  EXPECT_NO_THROW(p.validate());
}

// The rank that holds the most tokens counts, not seq_len / cp_size: two odd documents split over
// two contiguous ranks give rank 0 the larger half of each, 2^26 + 1 tokens, times the group 16 past
// 2^30 packed rows while the average rank stays exactly at it. Before, the average was checked.
TEST(ProblemLimits, TheBusiestRanksPackedRowsCountNotTheAverage) {
  Problem p = base();
  p.q_heads = 16;
  p.kv_heads = 1;
  p.head_dim = 64;
  p.seq_len = int64_t{1} << 27;
  p.cp_size = 2;
  p.scheme = Scheme::kContiguous;
  EXPECT_NO_THROW(p.validate()) << "2^26 tokens per rank x 16 = 2^30 packed rows";
  p.documents = {(int64_t{1} << 26) + 1, (int64_t{1} << 26) - 1};
  expect_refused(p, {"rank 0 holds 67108865 tokens", "1073741840 packed query rows", "2^30"});
}

// The element bound every shapes file meets holds for the C++ and C API too (byte counts of the
// fp32 state and gradients stay inside int64). Before, only the shapes parser checked it.
TEST(ProblemLimits, MoreThan2To48ElementsAreRefused) {
  Problem p = base();
  p.batch = kMaxBatch;
  p.q_heads = p.kv_heads = kMaxHeads;
  p.head_dim = 256;
  p.seq_len = int64_t{1} << 20;
  p.cp_size = 1024;
  expect_refused(p, {"exceeds 2^48 elements"});
  p.seq_len = int64_t{1} << 14;  // 2^16 * 2^10 * 2^14 * 2^8 = 2^48 exactly
  EXPECT_NO_THROW(p.validate());
}

TEST(ProblemLimits, SeqLenAndCpSizeLimitsNameTheirField) {
  Problem p = base();
  p.seq_len = (int64_t{1} << 30) + 8;
  expect_refused(p, {"seq_len", "1..1073741824"});
  p = base();
  p.cp_size = 2048;
  p.seq_len = 2048 * 2;
  expect_refused(p, {"cp_size", "1..1024"});
}

TEST(ProblemMask, DocumentsWindowsAndSoftcapAreCheckedByFieldName) {
  Problem p = base();
  p.seq_len = 1000;  // no ring size needs to divide it any more
  p.documents = {600, 0, 1, 399};
  p.window_left = 128;
  p.window_right = 0;
  p.softcap = 30;
  EXPECT_NO_THROW(p.validate());
  EXPECT_TRUE(p.has_mask_features());
  p.documents = {600, 1, 398};
  expect_refused(p, {"documents sum to 999", "seq_len 1000"});
  p.documents = {1001, -1};
  expect_refused(p, {"documents[1]", "-1"});
  p.documents = {1000};
  p.window_left = -2;
  expect_refused(p, {"window_left", "-2", "-1 (unbounded)"});
  p.window_left = -1;
  p.window_right = -5;
  expect_refused(p, {"window_right", "-5"});
  p.window_right = -1;
  p.softcap = -3;
  expect_refused(p, {"softcap", "finite and >= 0"});
  // float32 in the kernels: 1e39 was inf there (every logit NaN), 1e-50 was 0 (a division by it).
  p.softcap = 1e39;
  expect_refused(p, {"softcap 1e+39", "allowed: 0 (none) or 1e-30 .. 1e+30"});
  p.softcap = 1e-50;
  expect_refused(p, {"softcap 1e-50"});
  p.softcap = 0;
  p.softmax_scale = 1e38;  // times log2(e) past float32's 3.4e38
  expect_refused(p, {"softmax_scale 1e+38", "allowed: 0 (1/sqrt(head_dim)) or"});
  p.softmax_scale = 1e20;  // each in range, their quotient not
  p.softcap = 1e-20;
  expect_refused(p, {"softmax_scale / softcap = 1e+40"});
  p.softmax_scale = 0;
  p.softcap = 0;
  EXPECT_FALSE(p.has_mask_features());  // one document over the whole sequence is no mask
  EXPECT_NO_THROW(p.validate());
}

// The kernels run every mask feature (documents, windows, softcap) and refuse what they do not
// run yet, one line naming the field (the GPU and emulated backends call this before allocating
// anything): layouts other than bhsd and unequal shards, of the sequence or of a document.
TEST(ProblemMask, KernelRingRefusesFeaturesItLacks) {
  const auto message = [](const Problem& p) -> std::string {
    try {
      check_kernel_ring_problem(p);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
      return e.what();
    }
    return "";
  };
  Problem p = base();
  p.name = "packed";
  EXPECT_EQ(message(p), "");
  p.documents = {4000, 0, 96};  // every length divides 2 * cp_size (an empty one adds nothing)
  EXPECT_EQ(message(p), "");
  EXPECT_TRUE(kernel_needs_key_intervals(p));
  p.documents = {4004, 92};  // unequal shards: run as well
  EXPECT_EQ(message(p), "");
  p.documents.clear();
  EXPECT_FALSE(kernel_needs_key_intervals(p));
  p.window_left = 64;
  EXPECT_EQ(message(p), "");
  EXPECT_TRUE(kernel_needs_key_intervals(p));
  p.window_left = -1;
  p.window_right = 3;
  EXPECT_FALSE(kernel_needs_key_intervals(p)) << "causal: a right side alone is moot";
  p.window_right = 0;  // FlashAttention's causal (-1, 0)
  EXPECT_FALSE(kernel_needs_key_intervals(p));
  p.causal = false;
  EXPECT_TRUE(kernel_needs_key_intervals(p)) << "not causal: the right side bounds the keys";
  p.causal = true;
  p.window_right = -1;
  EXPECT_FALSE(kernel_needs_softcap(p));
  p.softcap = 50;
  EXPECT_EQ(message(p), "");
  EXPECT_TRUE(kernel_needs_softcap(p));
  EXPECT_FALSE(kernel_needs_key_intervals(p));
  p.softcap = 0;
  // Unequal shards and every layout run on the kernels too (issue 11).
  p.seq_len = 4100;
  p.layout = "sbhd";
  EXPECT_EQ(message(p), "");
}

}  // namespace
}  // namespace cpgen
