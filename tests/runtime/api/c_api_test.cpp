// The C ABI without a GPU: version, status names, thread-local errors, problem validation,
// partition positions against every vector set's partitions.json, and GPU entry points that report
// a missing device instead of throwing.
#include "cpgen/cpgen_c.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cpgen/ring_attention.h"
#include "generator/kernel_spec.h"
#include "test_util.h"
#include "tests/temp_dir.h"

namespace {

cpgen_problem valid_problem() {
  cpgen_problem p;
  EXPECT_EQ(cpgen_problem_init(&p), CPGEN_OK);
  p.q_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.seq_len = 4096;
  p.cp_size = 8;
  return p;
}

TEST(CApi, VersionMatchesTheLibrary) {
  EXPECT_STREQ(cpgen_version(), cpgen::version());
  EXPECT_STREQ(cpgen_version(), "0.1.0");
}

TEST(CApi, StatusNamesFollowErrorKinds) {
  EXPECT_STREQ(cpgen_status_name(CPGEN_OK), "ok");
  EXPECT_STREQ(cpgen_status_name(CPGEN_ERR_BAD_INPUT), "bad input");
  EXPECT_STREQ(cpgen_status_name(CPGEN_ERR_NO_DEVICE), "no CUDA device");
  EXPECT_STREQ(cpgen_status_name(CPGEN_ERR_NCCL), "NCCL error");
  EXPECT_STREQ(cpgen_status_name(12345), "unknown status");
}

TEST(CApi, ValidProblemPasses) {
  cpgen_problem p = valid_problem();
  EXPECT_EQ(cpgen_problem_validate(&p), CPGEN_OK) << cpgen_last_error();
}

struct BadField {
  const char* field;
  void (*spoil)(cpgen_problem&);
};

TEST(CApi, EveryBadFieldIsNamed) {
  const BadField cases[] = {
      {"batch", [](cpgen_problem& p) { p.batch = 0; }},
      {"q_heads", [](cpgen_problem& p) { p.q_heads = -1; }},
      {"kv_heads", [](cpgen_problem& p) { p.kv_heads = 5; }},
      {"head_dim", [](cpgen_problem& p) { p.head_dim = 80; }},
      {"GQA group", [](cpgen_problem& p) { p.kv_heads = 1; }},  // 32 / 1 = 32 is unsupported
      {"seq_len", [](cpgen_problem& p) { p.seq_len = 0; }},
      {"cp_size", [](cpgen_problem& p) { p.cp_size = 0; }},
      {"dtype", [](cpgen_problem& p) { p.dtype = 7; }},
      {"causal", [](cpgen_problem& p) { p.causal = 2; }},
      {"scheme", [](cpgen_problem& p) { p.scheme = 9; }},
      {"softmax_scale", [](cpgen_problem& p) { p.softmax_scale = -1; }},
      {"reserved", [](cpgen_problem& p) { p.reserved = 1; }},
  };
  for (const BadField& c : cases) {
    cpgen_problem p = valid_problem();
    c.spoil(p);
    EXPECT_EQ(cpgen_problem_validate(&p), CPGEN_ERR_BAD_INPUT) << c.field;
    const std::string message = cpgen_last_error();
    EXPECT_NE(message.find(c.field), std::string::npos) << c.field << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
  }
}

// Version 1's fields: the mask model and the layout, each bad value refused with the one-line
// message of Problem::validate (or of the C mapping), naming the field.
TEST(CApi, EveryBadMaskOrLayoutFieldIsNamed) {
  static const int64_t kShort[] = {1000, 96};  // sums to 1096, not seq_len 4096
  const BadField cases[] = {
      {"documents sum to 1096", [](cpgen_problem& p) { p.documents = kShort; p.document_count = 2; }},
      {"document_count -1 is negative", [](cpgen_problem& p) { p.document_count = -1; }},
      {"document_count 3 with documents NULL", [](cpgen_problem& p) { p.document_count = 3; }},
      // Counts past the limit are refused before any entry is read: 2^61 entries of 8 bytes wrap
      // the pointer sum back to the array's start (it read nothing and passed), 2^40 ran out of
      // host memory, INT64_MAX overflowed a vector's size (both an internal error).
      {"document_count 1048577 is too large; at most 1048576",
       [](cpgen_problem& p) { p.documents = kShort; p.document_count = (int64_t{1} << 20) + 1; }},
      {"document_count 2305843009213693952 is too large",
       [](cpgen_problem& p) { p.documents = kShort; p.document_count = int64_t{1} << 61; }},
      {"document_count 2305843009213693954 is too large",
       [](cpgen_problem& p) { p.documents = kShort; p.document_count = (int64_t{1} << 61) + 2; }},
      {"document_count 1099511627776 is too large",
       [](cpgen_problem& p) { p.documents = kShort; p.document_count = int64_t{1} << 40; }},
      {"document_count 9223372036854775807 is too large",
       [](cpgen_problem& p) { p.documents = kShort; p.document_count = INT64_MAX; }},
      {"window_left is -2", [](cpgen_problem& p) { p.window_left = -2; }},
      {"window_right is -7", [](cpgen_problem& p) { p.window_right = -7; }},
      {"softcap", [](cpgen_problem& p) { p.softcap = -1; }},
      {"layout 4 is not supported; allowed: 0 (bhsd), 1 (bshd), 2 (sbhd), 3 (thd)",
       [](cpgen_problem& p) { p.layout = 4; }},
      {"\"thd\" packs every sequence into one: batch must be 1, got 2",
       [](cpgen_problem& p) { p.layout = CPGEN_LAYOUT_THD; p.batch = 2; }},
      {"struct_size 12 is not a cpgen_problem this library knows", [](cpgen_problem& p) { p.struct_size = 12; }},
  };
  for (const BadField& c : cases) {
    cpgen_problem p = valid_problem();
    c.spoil(p);
    EXPECT_EQ(cpgen_problem_validate(&p), CPGEN_ERR_BAD_INPUT) << c.field;
    const std::string message = cpgen_last_error();
    EXPECT_NE(message.find(c.field), std::string::npos) << c.field << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
  }
}

// Good mask values pass validation and shape the partition: each document is split on its own,
// so 4096 tokens as documents of 4001, 0 and 95 over 8 contiguous ranks give rank 0 513 rows
// (501 + 12) and rank 7 511 (500 + 11).
TEST(CApi, DocumentsAndLayoutReachTheProblem) {
  static const int64_t kDocs[] = {4001, 0, 95};
  cpgen_problem p = valid_problem();
  EXPECT_EQ(p.struct_size, static_cast<int32_t>(sizeof(cpgen_problem)));
  EXPECT_EQ(p.window_left, -1);
  EXPECT_EQ(p.window_right, -1);
  EXPECT_EQ(p.layout, CPGEN_LAYOUT_BHSD);
  p.scheme = CPGEN_SCHEME_CONTIGUOUS;
  p.documents = kDocs;
  p.document_count = 3;
  p.window_left = 128;
  p.softcap = 30;
  p.layout = CPGEN_LAYOUT_BSHD;
  ASSERT_EQ(cpgen_problem_validate(&p), CPGEN_OK) << cpgen_last_error();
  int64_t total = 0;
  std::vector<int64_t> rows(8, -1);
  for (int32_t r = 0; r < 8; ++r) {
    ASSERT_EQ(cpgen_partition_rows(&p, r, &rows[r]), CPGEN_OK) << cpgen_last_error();
    std::vector<int64_t> positions(static_cast<size_t>(rows[r]), -1);
    ASSERT_EQ(cpgen_partition_positions(&p, r, positions.data(), positions.size()), CPGEN_OK);
    EXPECT_NE(positions.back(), -1);
    total += rows[r];
  }
  EXPECT_EQ(total, 4096);
  EXPECT_EQ(rows[0], 513);
  EXPECT_EQ(rows[7], 511);
  std::vector<int64_t> short_buffer(512);
  EXPECT_EQ(cpgen_partition_positions(&p, 0, short_buffer.data(), short_buffer.size()), CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("capacity 512 is less than the 513 rows of rank 0"),
            std::string::npos)
      << cpgen_last_error();
}

// Layouts and unequal shards are no longer refused by the ring kernels: without a GPU, creating
// a ring gets as far as looking for the device.
// A family's default kernel for a problem: the wgmma tiles (128-key tiles, 64 at head dim 256),
// the problem's group and mask features, the ping-pong and persistent variants; bad names and short buffers are
// one-line errors that leave the buffer alone.
TEST(CApi, FamilyKernelUriNamesTheFamilyDefaultForTheProblem) {
  cpgen_problem p = valid_problem();  // bf16, hd 128, causal, 32 q heads over 8 kv heads
  char uri[128];
  ASSERT_EQ(cpgen_family_kernel_uri(&p, "wgmma", uri, sizeof uri), CPGEN_OK) << cpgen_last_error();
  EXPECT_STREQ(uri, "ring_fwd_wgmma_bf16_hd128_causal_gqa4_bm128_bn128_c2_s2");
  ASSERT_EQ(cpgen_family_kernel_uri(&p, "wgmma-pingpong", uri, sizeof uri), CPGEN_OK) << cpgen_last_error();
  EXPECT_STREQ(uri, "ring_fwd_wgmma_bf16_hd128_causal_gqa4_bm128_bn128_c2_s2_pingpong");
  ASSERT_EQ(cpgen_family_kernel_uri(&p, "wgmma-persistent", uri, sizeof uri), CPGEN_OK) << cpgen_last_error();
  EXPECT_STREQ(uri, "ring_fwd_wgmma_bf16_hd128_causal_gqa4_bm128_bn128_c2_s2_persistent");
  // FlashAttention's causal window (-1, 0), or any right side alone, is plain causal: the causal
  // kernel, not its key-interval (_ivl) variant, which was chosen before.
  for (int64_t right : {0, 7}) {
    p.window_right = right;
    ASSERT_EQ(cpgen_family_kernel_uri(&p, "wgmma", uri, sizeof uri), CPGEN_OK) << cpgen_last_error();
    EXPECT_STREQ(uri, "ring_fwd_wgmma_bf16_hd128_causal_gqa4_bm128_bn128_c2_s2") << "window_right " << right;
  }
  p.window_right = -1;
  p.head_dim = 256;
  p.dtype = CPGEN_DTYPE_FP16;
  p.causal = 0;
  p.window_left = 64;
  p.softcap = 30;
  ASSERT_EQ(cpgen_family_kernel_uri(&p, "wgmma", uri, sizeof uri), CPGEN_OK) << cpgen_last_error();
  EXPECT_STREQ(uri, "ring_fwd_wgmma_fp16_hd256_full_ivl_cap_gqa4_bm128_bn64_c2_s2");
  ASSERT_EQ(cpgen_family_kernel_uri(&p, "mma.sync", uri, sizeof uri), CPGEN_OK) << cpgen_last_error();
  EXPECT_STREQ(uri, "ring_fwd_fp16_hd256_full_ivl_cap_gqa4_bm64_bn64_w4_s2");

  std::memset(uri, 'x', sizeof uri);
  EXPECT_EQ(cpgen_family_kernel_uri(&p, "mma", uri, sizeof uri), CPGEN_ERR_BAD_INPUT);
  EXPECT_STREQ(cpgen_last_error(),
               "cpgen_family_kernel_uri: family 'mma' is not known; allowed: mma.sync, wgmma, wgmma-pingpong, wgmma-persistent");
  EXPECT_EQ(cpgen_family_kernel_uri(&p, "wgmma", uri, 20), CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("cpgen_family_kernel_uri: size 20 cannot hold"), std::string::npos)
      << cpgen_last_error();
  EXPECT_EQ(uri[0], 'x');  // nothing written
  p.kv_heads = 2;  // group 16, which the wgmma family has too
  ASSERT_EQ(cpgen_family_kernel_uri(&p, "wgmma", uri, sizeof uri), CPGEN_OK) << cpgen_last_error();
  EXPECT_STREQ(uri, "ring_fwd_wgmma_fp16_hd256_full_ivl_cap_gqa16_bm128_bn64_c2_s2");
  p.kv_heads = 1;  // group 32: no family has it
  EXPECT_EQ(cpgen_family_kernel_uri(&p, "wgmma", uri, sizeof uri), CPGEN_ERR_BAD_INPUT);
  EXPECT_EQ(std::string(cpgen_last_error()).find('\n'), std::string::npos) << cpgen_last_error();
  EXPECT_EQ(cpgen_family_kernel_uri(nullptr, "wgmma", uri, sizeof uri), CPGEN_ERR_BAD_INPUT);
  EXPECT_EQ(cpgen_family_kernel_uri(&p, nullptr, uri, sizeof uri), CPGEN_ERR_BAD_INPUT);
}

// The same for a target arch: mma.sync's head dim 256 tiles cut down to fit the 99 KB sm_89 (the
// documented ones do not), the same tiles where they fit, a wgmma family only on sm_90a, an arch
// cpgen does not target refused; NULL or "" is the arch-free answer.
TEST(CApi, FamilyKernelUriForArchGivesTilesThatFitTheArch) {
  cpgen_problem p = valid_problem();  // bf16, hd 128, causal, 32 q heads over 8 kv heads
  p.head_dim = 256;
  char uri[128];
  ASSERT_EQ(cpgen_family_kernel_uri_for_arch(&p, "mma.sync", "sm_89", uri, sizeof uri), CPGEN_OK)
      << cpgen_last_error();
  const std::string on_89 = uri;
  const cpgen::KernelSpec fitted = cpgen::KernelSpec::parse(on_89);
  EXPECT_TRUE(cpgen::check_feasibility(fitted, "sm_89").feasible) << on_89;
  EXPECT_EQ(fitted, cpgen::KernelSpec::default_for_arch(cpgen::Dtype::kBf16, 256, true, 4, "sm_89"));
  ASSERT_EQ(cpgen_family_kernel_uri(&p, "mma.sync", uri, sizeof uri), CPGEN_OK) << cpgen_last_error();
  EXPECT_FALSE(cpgen::check_feasibility(cpgen::KernelSpec::parse(uri), "sm_89").feasible) << uri;  // why the arch matters
  ASSERT_EQ(cpgen_family_kernel_uri_for_arch(&p, "mma.sync", "sm_90a", uri, sizeof uri), CPGEN_OK);
  EXPECT_STREQ(uri, "ring_fwd_bf16_hd256_causal_gqa4_bm64_bn64_w4_s2");
  ASSERT_EQ(cpgen_family_kernel_uri_for_arch(&p, "wgmma", "sm_90a", uri, sizeof uri), CPGEN_OK);
  EXPECT_STREQ(uri, "ring_fwd_wgmma_bf16_hd256_causal_gqa4_bm128_bn64_c2_s2");
  ASSERT_EQ(cpgen_family_kernel_uri_for_arch(&p, "wgmma", "", uri, sizeof uri), CPGEN_OK);
  EXPECT_STREQ(uri, "ring_fwd_wgmma_bf16_hd256_causal_gqa4_bm128_bn64_c2_s2");
  ASSERT_EQ(cpgen_family_kernel_uri_for_arch(&p, "mma.sync", nullptr, uri, sizeof uri), CPGEN_OK);
  EXPECT_STREQ(uri, "ring_fwd_bf16_hd256_causal_gqa4_bm64_bn64_w4_s2");

  std::memset(uri, 'x', sizeof uri);
  EXPECT_EQ(cpgen_family_kernel_uri_for_arch(&p, "wgmma-pingpong", "sm_100", uri, sizeof uri), CPGEN_ERR_BAD_INPUT);
  EXPECT_STREQ(cpgen_last_error(),
               "cpgen_family_kernel_uri_for_arch: family 'wgmma-pingpong' runs on sm_90a only (wgmma and TMA), "
               "not on sm_100; allowed there: mma.sync");
  EXPECT_EQ(cpgen_family_kernel_uri_for_arch(&p, "mma.sync", "sm_75", uri, sizeof uri), CPGEN_ERR_BAD_INPUT);
  EXPECT_STREQ(cpgen_last_error(),
               "cpgen_family_kernel_uri_for_arch: arch 'sm_75' is not supported; allowed: sm_80, sm_86, sm_89, "
               "sm_90, sm_90a, sm_100, sm_120");
  EXPECT_EQ(uri[0], 'x');  // nothing written
}

// Without a GPU the device's arch is a no-device error; bad arguments are bad input on any
// machine (a negative device or a size of 0 was answered no-device where there was no driver).
TEST(CApi, DeviceArchNeedsADevice) {
  char arch[16];
  EXPECT_EQ(cpgen_device_arch(0, nullptr, sizeof arch), CPGEN_ERR_BAD_INPUT);
  EXPECT_EQ(cpgen_device_arch(-1, arch, sizeof arch), CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("device -1 is not a device ordinal"), std::string::npos);
  EXPECT_EQ(cpgen_device_arch(0, arch, 0), CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("size 0"), std::string::npos);
  const cpgen_status status = cpgen_device_arch(0, arch, sizeof arch);
  if (status == CPGEN_OK) {  // a GPU: an arch cpgen targets
    EXPECT_NO_THROW(cpgen::validate_arch(arch)) << arch;
    EXPECT_EQ(cpgen_device_arch(-1, arch, sizeof arch), CPGEN_ERR_BAD_INPUT);
  } else {
    EXPECT_EQ(status, CPGEN_ERR_NO_DEVICE) << cpgen_last_error();
  }
}

// A layout and shards of unequal length pass every check before the device: without a GPU the
// answer is no device, with one a ring (it ran skipped on the first H100, which has one).
TEST(CApi, LayoutAndUnequalShardsReachTheDevice) {
  std::string why;
  const bool gpu = cpgen::testing::have_gpu(&why);
  cpgen_problem p = valid_problem();
  p.seq_len = 4100;
  p.layout = CPGEN_LAYOUT_SBHD;
  cpgen_ring* ring = nullptr;
  EXPECT_EQ(cpgen_ring_create_loopback(&p, 0, nullptr, &ring), gpu ? CPGEN_OK : CPGEN_ERR_NO_DEVICE)
      << cpgen_last_error();
  EXPECT_EQ(ring != nullptr, gpu);
  cpgen_ring_destroy(ring);
}

// A program built against version 0 calls the old symbol with a struct that ends at
// softmax_scale: nothing past it is written, and the version-1 fields are never read.
TEST(CApi, VersionZeroCallersKeepWorking) {
  struct Guarded {
    cpgen_problem p;
  } g;
  std::memset(&g, 0x5a, sizeof g);
  ASSERT_EQ((cpgen_problem_init)(&g.p), CPGEN_OK);
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(&g.p);
  for (size_t i = offsetof(cpgen_problem, documents); i < sizeof(cpgen_problem); ++i)
    ASSERT_EQ(bytes[i], 0x5a) << "byte " << i << " past a version-0 struct was written";
  EXPECT_EQ(g.p.struct_size, 0);
  g.p.q_heads = 32;
  g.p.kv_heads = 8;
  g.p.head_dim = 128;
  g.p.seq_len = 4100;  // no longer needs to divide
  g.p.cp_size = 8;
  EXPECT_EQ(cpgen_problem_validate(&g.p), CPGEN_OK) << cpgen_last_error();
  EXPECT_EQ(cpgen_problem_init_sized(&g.p, 40), CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("struct_size 40"), std::string::npos) << cpgen_last_error();
  // A size past int64 is named as given (2^63 was printed as a negative size).
  EXPECT_EQ(cpgen_problem_init_sized(&g.p, size_t{1} << 63), CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("struct_size 9223372036854775808 is not"), std::string::npos)
      << cpgen_last_error();
  // Version 0's own size (a caller passing sizeof of its version-0 struct) is version 0: it was
  // refused, though the header asks for the caller's sizeof.
  std::memset(&g, 0x5a, sizeof g);
  ASSERT_EQ(cpgen_problem_init_sized(&g.p, offsetof(cpgen_problem, documents)), CPGEN_OK) << cpgen_last_error();
  EXPECT_EQ(g.p.struct_size, 0);
  for (size_t i = offsetof(cpgen_problem, documents); i < sizeof(cpgen_problem); ++i)
    ASSERT_EQ(bytes[i], 0x5a) << "byte " << i << " past a version-0 struct was written";
  // An FFI caller that lays the version-0 struct out itself sets struct_size to its size, as the
  // header says: that is version 0 too, and nothing past it is read (the poison there would be a
  // document pointer and count). It was refused as a size this library does not know.
  g.p.struct_size = static_cast<int32_t>(offsetof(cpgen_problem, documents));
  g.p.q_heads = 32;
  g.p.kv_heads = 8;
  g.p.head_dim = 128;
  g.p.seq_len = 4096;
  g.p.cp_size = 8;
  EXPECT_EQ(cpgen_problem_validate(&g.p), CPGEN_OK) << cpgen_last_error();
}

// tests/api_probe/oom_probe.cpp: with every allocation failing, a call returns its status and a
// message. Before, the guard's handler stored "out of host memory" (past the string's inline
// room) and its own bad_alloc left the noexcept guard: std::terminate, the caller's process gone.
TEST(CApi, ACallThatFailsWithNoMemoryLeftReturns) {
  cpgen::testing::TempDir dir("c_api_oom");
  const cpgen::testing::ShellResult r = cpgen::testing::run_shell("timeout 60 '" CPGEN_OOM_PROBE_PATH "'", dir.path() + "/log");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(std::string("status ") + cpgen_status_name(CPGEN_ERR_INTERNAL) + "\n"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("last error: out of host memory"), std::string::npos) << r.output;
}

TEST(CApi, NullArgumentsAreErrorsNotCrashes) {
  EXPECT_EQ(cpgen_problem_validate(nullptr), CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("problem is NULL"), std::string::npos);
  EXPECT_EQ(cpgen_problem_init_sized(nullptr, sizeof(cpgen_problem)), CPGEN_ERR_BAD_INPUT);
  EXPECT_EQ((cpgen_problem_init)(nullptr), CPGEN_ERR_BAD_INPUT);
  EXPECT_EQ(cpgen_device_count(nullptr), CPGEN_ERR_BAD_INPUT);
  EXPECT_EQ(cpgen_ring_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
            CPGEN_ERR_BAD_INPUT);
  EXPECT_EQ(cpgen_ring_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                nullptr, nullptr, nullptr),
            CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("cpgen_ring_backward: ring is NULL"), std::string::npos)
      << cpgen_last_error();
  EXPECT_EQ(cpgen_ring_backward_all(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                    nullptr, nullptr, nullptr),
            CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("cpgen_ring_backward_all: ring is NULL"), std::string::npos)
      << cpgen_last_error();
  cpgen_shard_strides strides{};
  EXPECT_EQ(cpgen_ring_forward_strided(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &strides, nullptr),
            CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("cpgen_ring_forward_strided: ring is NULL"), std::string::npos);
  EXPECT_EQ(cpgen_ring_backward_strided(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                        nullptr, nullptr, nullptr, nullptr),
            CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("cpgen_ring_backward_strided: ring is NULL"), std::string::npos);
  EXPECT_EQ(cpgen_ring_synchronize(nullptr), CPGEN_ERR_BAD_INPUT);
  EXPECT_STREQ(cpgen_ring_kernel_uri(nullptr), "");
  EXPECT_STREQ(cpgen_ring_config_source(nullptr), "");
  EXPECT_STREQ(cpgen_ring_config_reason(nullptr), "");
  EXPECT_STREQ(cpgen_ring_backward_kernel_uri(nullptr), "");
  cpgen_ring_destroy(nullptr);
}

TEST(CApi, LastErrorIsPerThread) {
  cpgen_problem bad = valid_problem();
  bad.batch = 0;
  ASSERT_EQ(cpgen_problem_validate(&bad), CPGEN_ERR_BAD_INPUT);
  const std::string mine = cpgen_last_error();
  ASSERT_NE(mine.find("batch"), std::string::npos);
  std::string other_before, other_after;
  std::thread t([&] {
    other_before = cpgen_last_error();
    cpgen_problem also_bad = valid_problem();
    also_bad.head_dim = 80;
    cpgen_problem_validate(&also_bad);
    other_after = cpgen_last_error();
  });
  t.join();
  EXPECT_EQ(other_before, "");
  EXPECT_NE(other_after.find("head_dim"), std::string::npos);
  EXPECT_EQ(std::string(cpgen_last_error()), mine) << "another thread's failure leaked into this one";
}

TEST(CApi, PartitionPositionsMatchReferenceLayouts) {
  nlohmann::json cases = nlohmann::json::object({{"cases", nlohmann::json::array()}});
  for (const std::string& file : cpgen::testing::partition_files()) {
    const nlohmann::json doc = cpgen::testing::load_json(file);  // alive while its cases are read
    for (const auto& c : doc.at("cases")) cases["cases"].push_back(c);
  }
  const std::pair<const char*, int32_t> schemes[] = {{"contiguous", CPGEN_SCHEME_CONTIGUOUS},
                                                     {"zigzag", CPGEN_SCHEME_ZIGZAG},
                                                     {"zigzag-token", CPGEN_SCHEME_ZIGZAG_TOKEN},
                                                     {"striped", CPGEN_SCHEME_STRIPED}};
  int checked = 0;
  for (const auto& c : cases["cases"]) {
    for (const auto& [name, value] : schemes) {
      if (!c.contains("positions") || c["scheme"] != name) continue;
      cpgen_problem p;
      cpgen_problem_init(&p);
      p.q_heads = p.kv_heads = 1;
      p.head_dim = 64;
      p.seq_len = c["seq_len"];
      p.cp_size = c["cp_size"];
      p.scheme = value;
      for (int32_t r = 0; r < p.cp_size; ++r) {
        std::vector<int64_t> got(p.seq_len / p.cp_size, -1);
        ASSERT_EQ(cpgen_partition_positions(&p, r, got.data(), got.size()), CPGEN_OK) << cpgen_last_error();
        EXPECT_EQ(got, c["positions"][r].get<std::vector<int64_t>>()) << name << " rank " << r;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0) << "partitions.json had no case in the expected form";
  cpgen_problem p = valid_problem();
  std::vector<int64_t> small(3);
  EXPECT_EQ(cpgen_partition_positions(&p, 0, small.data(), small.size()), CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("capacity 3"), std::string::npos);
  EXPECT_EQ(cpgen_partition_positions(&p, 8, small.data(), small.size()), CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("rank 8"), std::string::npos);
}

// A rank with no rows (a sequence shorter than the ring) lists nothing: its positions may be NULL,
// as a framework's empty tensor is; a rank with rows still needs the array.
TEST(CApi, PartitionPositionsOfAnEmptyRankTakeNull) {
  cpgen_problem p = valid_problem();
  p.seq_len = 2;
  p.cp_size = 4;
  p.scheme = CPGEN_SCHEME_CONTIGUOUS;
  ASSERT_EQ(cpgen_problem_validate(&p), CPGEN_OK) << cpgen_last_error();
  int64_t rows = -1;
  ASSERT_EQ(cpgen_partition_rows(&p, 3, &rows), CPGEN_OK) << cpgen_last_error();
  ASSERT_EQ(rows, 0);
  EXPECT_EQ(cpgen_partition_positions(&p, 3, nullptr, 0), CPGEN_OK) << cpgen_last_error();
  ASSERT_EQ(cpgen_partition_rows(&p, 0, &rows), CPGEN_OK) << cpgen_last_error();
  ASSERT_GT(rows, 0);
  EXPECT_EQ(cpgen_partition_positions(&p, 0, nullptr, 0), CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("positions is NULL"), std::string::npos) << cpgen_last_error();
}

// The largest sequence a problem may have is counted, not listed (one rank of 2^30 tokens took 27 s
// and 8 GB to count; PartitionVarlen.RowCountsAreThePositionsCounted counts 2^39), and a capacity
// too small is refused before anything is listed.
TEST(CApi, PartitionRowsOfTheLongestSequenceAreCountedNotListed) {
  cpgen_problem p = valid_problem();
  p.kv_heads = p.q_heads;  // GQA 1: 2^30 packed rows, the limit
  p.seq_len = int64_t{1} << 30;
  p.cp_size = 1;
  ASSERT_EQ(cpgen_problem_validate(&p), CPGEN_OK) << cpgen_last_error();
  int64_t rows = -1;
  ASSERT_EQ(cpgen_partition_rows(&p, 0, &rows), CPGEN_OK) << cpgen_last_error();
  EXPECT_EQ(rows, int64_t{1} << 30);
  int64_t one = -1;
  EXPECT_EQ(cpgen_partition_positions(&p, 0, &one, 1), CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("capacity 1 is less than the 1073741824 rows"), std::string::npos)
      << cpgen_last_error();
  EXPECT_EQ(one, -1);
}

TEST(CApi, RingWithoutGpuReportsNoDevice) {
  std::string why;
  if (cpgen::testing::have_gpu(&why)) GTEST_SKIP() << "a GPU is present; this checks the no-GPU path";
  int32_t count = -1;
  EXPECT_EQ(cpgen_device_count(&count), CPGEN_OK);
  EXPECT_EQ(count, 0);
  cpgen_problem p = valid_problem();
  cpgen_ring* ring = reinterpret_cast<cpgen_ring*>(0x1);
  EXPECT_EQ(cpgen_ring_create_loopback(&p, 0, nullptr, &ring), CPGEN_ERR_NO_DEVICE);
  EXPECT_EQ(ring, nullptr);
  EXPECT_FALSE(std::string(cpgen_last_error()).empty());
  // A bad problem is reported before the device is looked for.
  p.head_dim = 80;
  EXPECT_EQ(cpgen_ring_create_loopback(&p, 0, nullptr, &ring), CPGEN_ERR_BAD_INPUT);
}

// The backward's C arguments on a real loopback ring: a NULL array, a NULL shard entry and the
// single-shard call on a ring of several ranks each give CPGEN_ERR_BAD_INPUT naming what is wrong.
TEST(CApi, BackwardArgumentsAreCheckedOnALoopbackRing) {
  CPGEN_REQUIRE_GPU();
  cpgen_problem p = valid_problem();
  p.q_heads = 2;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.seq_len = 128;
  p.cp_size = 2;
  cpgen_ring* ring = nullptr;
  ASSERT_EQ(cpgen_ring_create_loopback(&p, 0, nullptr, &ring), CPGEN_OK) << cpgen_last_error();
  // Both kernels are known before any call: bf16 head dim 64, causal (valid_problem), GQA 1.
  EXPECT_EQ(std::string(cpgen_ring_kernel_uri(ring)).rfind("ring_fwd_", 0), 0u) << cpgen_ring_kernel_uri(ring);
  EXPECT_EQ(std::string(cpgen_ring_backward_kernel_uri(ring)).rfind("ring_bwd_bf16_hd64_causal_gqa1_", 0), 0u)
      << cpgen_ring_backward_kernel_uri(ring);
  const void* none[2] = {nullptr, nullptr};
  void* none_out[2] = {nullptr, nullptr};
  const float* none_lse[2] = {nullptr, nullptr};
  EXPECT_EQ(cpgen_ring_backward_all(ring, none, none, none, none, none_lse, none, nullptr, none_out, none_out,
                                    nullptr),
            CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("cpgen_ring_backward_all: dq is NULL"), std::string::npos)
      << cpgen_last_error();
  // Arrays present, their entries NULL: the first tensor of rank 0 is named.
  EXPECT_EQ(cpgen_ring_backward_all(ring, none, none, none, none, none_lse, none, none_out, none_out, none_out,
                                    nullptr),
            CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("q of rank 0 is null"), std::string::npos) << cpgen_last_error();
  EXPECT_EQ(cpgen_ring_backward(ring, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                nullptr, nullptr),
            CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("call backward_all"), std::string::npos) << cpgen_last_error();
  cpgen_ring_destroy(ring);
}

// A loopback device below -1 names no device: refused before any device is looked for (it ran
// on device 0 before). -1 means device 0, as RingOptions::device documents.
TEST(CApi, ALoopbackDeviceBelowMinusOneIsBadInput) {
  cpgen_problem p = valid_problem();
  cpgen_ring* ring = reinterpret_cast<cpgen_ring*>(0x1);
  EXPECT_EQ(cpgen_ring_create_loopback(&p, -5, nullptr, &ring), CPGEN_ERR_BAD_INPUT);
  EXPECT_EQ(ring, nullptr);
  const std::string message = cpgen_last_error();
  EXPECT_NE(message.find("device -5"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(CApi, NcclRingNeedsACommunicator) {
  cpgen_problem p = valid_problem();
  cpgen_ring* ring = nullptr;
  EXPECT_EQ(cpgen_ring_create_nccl(&p, nullptr, nullptr, 0, &ring), CPGEN_ERR_BAD_INPUT);
  EXPECT_NE(std::string(cpgen_last_error()).find("nccl_comm is NULL"), std::string::npos);
}

TEST(CApi, NcclFileBootstrapErrorsComeBackAsStatus) {
  void* comm = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(cpgen_nccl_comm_from_file(nullptr, 0, 2, 0, 1, nullptr, &comm), CPGEN_ERR_BAD_INPUT);
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(std::string(cpgen_last_error()).find("path is NULL"), std::string::npos);
  // Rank 1 of 2 with no file: times out (or NCCL is not built in); never throws through C.
  const cpgen_status s =
      cpgen_nccl_comm_from_file("/nonexistent-dir/cpgen-id", 1, 2, 0, 0.2, "job", &comm);
  EXPECT_EQ(s, CPGEN_ERR_NCCL) << cpgen_last_error();
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(cpgen_nccl_comm_destroy(nullptr), CPGEN_OK);
}

// The unique-id bootstrap's bad input: each a status and one line naming the argument, *comm
// cleared, before NCCL is asked for anything. (Its success, on the stand-in NCCL:
// WatchdogStandIn.ACommunicatorOnAnotherDeviceLeavesTheCallersContextCurrent.)
TEST(CApi, NcclUniqueIdBootstrapRefusesBadArguments) {
  unsigned char id[CPGEN_NCCL_UNIQUE_ID_BYTES] = {};
  void* comm = nullptr;
  struct Case {
    std::function<cpgen_status()> call;
    const char* names;
    bool clears_comm;
  };
  const Case cases[] = {
      {[&] { return cpgen_nccl_unique_id(nullptr, sizeof id); }, "id is NULL", false},
      {[&] { return cpgen_nccl_unique_id(id, 64); }, "size 64 is not an NCCL unique id's 128 bytes", false},
      {[&] { return cpgen_nccl_comm_init_rank(nullptr, sizeof id, 0, 1, 0, &comm); }, "id is NULL", true},
      {[&] { return cpgen_nccl_comm_init_rank(id, sizeof id + 1, 0, 1, 0, &comm); }, "size 129", true},
      {[&] { return cpgen_nccl_comm_init_rank(id, sizeof id, 2, 2, 0, &comm); }, "rank 2 is outside [0, nranks 2)", true},
      {[&] { return cpgen_nccl_comm_init_rank(id, sizeof id, 0, 0, 0, &comm); }, "nranks 0 is not allowed; allowed: 1 and up",
       true},
      {[&] { return cpgen_nccl_comm_init_rank(id, sizeof id, 0, 1, -1, &comm); }, "device -1 is not a device ordinal",
       true},
  };
  for (const Case& c : cases) {
    comm = reinterpret_cast<void*>(0x1);
    const cpgen_status status = c.call();
    const std::string message = cpgen_last_error();
    EXPECT_EQ(status, CPGEN_ERR_BAD_INPUT) << message;
    EXPECT_NE(message.find(c.names), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    if (c.clears_comm) EXPECT_EQ(comm, nullptr) << message;
  }
}

}  // namespace
