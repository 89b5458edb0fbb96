// The forward ring on one GPU through the loopback transport: every ring size, scheme, dtype,
// head dim, GQA group and mask, against every vector set and the float64 CPU reference. GPU only.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "cpgen/error.h"
#include "cpgen/ring_attention.h"
#include "runtime/api/gpu_ring_run.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/reference.h"
#include "runtime/ring/vectors.h"
#include "test_util.h"
#include "tests/runtime/api/gpu_ring_check.h"

namespace cpgen {
namespace {

using testing::expect_close_to;
using testing::as_float;
using testing::partitionable;

constexpr Scheme kSchemes[] = {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken, Scheme::kStriped};
constexpr Dtype kDtypes[] = {Dtype::kBf16, Dtype::kFp16};

TEST(GpuRing, LoopbackMatchesVectorsForEveryRingSizeSchemeAndDtype) {
  CPGEN_REQUIRE_GPU();
  int runs = 0;
  for (const std::string& file : testing::vector_files()) {
    AttentionVectors vec = load_attention_vectors(file);
    const std::vector<float> q = as_float(vec.q), k = as_float(vec.k), v = as_float(vec.v);
    for (int n : {1, 2, 4, 8})
      for (Scheme scheme : kSchemes) {
        if (!partitionable(scheme, vec.seq_len, n)) continue;
        for (Dtype dtype : kDtypes) {
          const Problem p = problem_from_vectors(vec, n, scheme, dtype);
          gpu::GpuRingResult r = gpu::run_gpu_ring_loopback(p, q, k, v);
          expect_close_to(r.out, r.lse, vec.out, vec.lse, p.head_dim,
                          vec.name + " N=" + std::to_string(n) + " " + std::string(scheme_name(scheme)) +
                              " " + std::string(dtype_name(dtype)) + " kernel " + r.kernel_uri);
          ++runs;
        }
      }
  }
  EXPECT_GT(runs, 100) << "too few ring configurations were checked";
}

// GQA 1/4/8 and head dims 64/128/256 beyond what the vectors hold, against the float64
// reference on the full sequence.
TEST(GpuRing, LoopbackMatchesReferenceForGqaAndHeadDims) {
  CPGEN_REQUIRE_GPU();
  uint32_t seed = 1;
  for (int hd : {64, 128, 256})
    for (int group : {1, 4, 8})
      for (bool causal : {true, false}) {
        Problem p;
        p.q_heads = 8;
        p.kv_heads = 8 / group;
        p.head_dim = hd;
        p.seq_len = 256;
        p.causal = causal;
        const int64_t qn = p.q_heads * p.seq_len * hd, kn = p.kv_heads * p.seq_len * hd;
        const std::vector<float> q = testing::random_bf16_exact(qn, seed++);
        const std::vector<float> k = testing::random_bf16_exact(kn, seed++);
        const std::vector<float> v = testing::random_bf16_exact(kn, seed++);
        AttentionShape shape{.batch = p.batch, .q_heads = p.q_heads, .kv_heads = p.kv_heads, .head_dim = p.head_dim, .scale = p.scale(), .causal = causal};
        std::vector<int64_t> positions(p.seq_len);
        for (int64_t i = 0; i < p.seq_len; ++i) positions[i] = i;
        ReferenceForward ref = reference_forward(shape, testing::to_double(q), testing::to_double(k),
                                                 testing::to_double(v), positions, positions);
        for (int n : {1, 2, 4, 8})
          for (Scheme scheme : {Scheme::kZigzag, Scheme::kStriped})
            for (Dtype dtype : kDtypes) {
              p.cp_size = n;
              p.scheme = scheme;
              p.dtype = dtype;
              gpu::GpuRingResult r = gpu::run_gpu_ring_loopback(p, q, k, v);
              expect_close_to(r.out, r.lse, ref.out, ref.lse, hd,
                              "hd" + std::to_string(hd) + " gqa" + std::to_string(group) +
                                  (causal ? " causal" : " full") + " N=" + std::to_string(n) + " " +
                                  std::string(scheme_name(scheme)) + " " +
                                  std::string(dtype_name(dtype)) + " kernel " + r.kernel_uri);
            }
      }
}

// Issue 11 on the GPU: one problem of unequal shards (seq_len 1000 over 3 zigzag ranks: 334, 334
// and 332 rows) handed over in bhsd, bshd and sbhd gives the same out, lse, dk and dv bit for bit
// (the kernels read through strides and sum in the same order) and the same dq up to the order
// of its fp32 atomic adds, and bhsd matches the float64 reference.
TEST(GpuRing, EveryLayoutAndUnequalShardsForwardAndBackward) {
  CPGEN_REQUIRE_GPU();
  Problem p;
  p.batch = 2;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.head_dim = 128;
  p.seq_len = 1000;
  p.cp_size = 3;
  const int64_t qn = p.batch * p.q_heads * p.seq_len * 128, kn = p.batch * p.kv_heads * p.seq_len * 128;
  const std::vector<float> q = testing::random_bf16_exact(qn, 21), k = testing::random_bf16_exact(kn, 22);
  const std::vector<float> v = testing::random_bf16_exact(kn, 23), dout = testing::random_bf16_exact(qn, 24);
  AttentionShape shape{.batch = p.batch, .q_heads = p.q_heads, .kv_heads = p.kv_heads, .head_dim = p.head_dim,
                       .scale = p.scale(), .causal = true};
  std::vector<int64_t> positions(p.seq_len);
  for (int64_t i = 0; i < p.seq_len; ++i) positions[i] = i;
  const ReferenceForward ref = reference_forward(shape, testing::to_double(q), testing::to_double(k),
                                                 testing::to_double(v), positions, positions);
  const gpu::GpuRingResult want = gpu::run_gpu_ring_loopback(p, q, k, v, {}, &dout);
  expect_close_to(want.out, want.lse, ref.out, ref.lse, p.head_dim, "bhsd unequal shards kernel " + want.kernel_uri);
  for (const char* layout : {"bshd", "sbhd"}) {
    p.layout = layout;
    const gpu::GpuRingResult got = gpu::run_gpu_ring_loopback(p, q, k, v, {}, &dout);
    EXPECT_EQ(got.out, want.out) << layout;
    EXPECT_EQ(got.lse, want.lse) << layout;
    // dq sums by red.add in whatever order the CTAs reach it: equal to fp32 rounding, then at most
    // a rounding step of the input dtype apart.
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want.dq.size() && i < got.dq.size(); ++i) {
      diff += (got.dq[i] - want.dq[i]) * (got.dq[i] - want.dq[i]);
      norm += want.dq[i] * want.dq[i];
    }
    ASSERT_EQ(got.dq.size(), want.dq.size()) << layout;
    EXPECT_LT(std::sqrt(diff / norm), 1e-3) << layout;
    EXPECT_EQ(got.dk, want.dk) << layout;
    EXPECT_EQ(got.dv, want.dv) << layout;
  }
}

// A second forward on the same ring object reuses its buffers and must not see the first run's
// state (is_first_step resets it).
TEST(GpuRing, RepeatedForwardGivesTheSameResult) {
  CPGEN_REQUIRE_GPU();
  Problem p;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.head_dim = 128;
  p.seq_len = 512;
  p.cp_size = 4;
  const std::vector<float> q = testing::random_bf16_exact(p.q_heads * p.seq_len * 128, 11);
  const std::vector<float> k = testing::random_bf16_exact(p.kv_heads * p.seq_len * 128, 12);
  const std::vector<float> v = testing::random_bf16_exact(p.kv_heads * p.seq_len * 128, 13);
  RingAttention ring = RingAttention::loopback(p);
  std::vector<gpu::DeviceShard> shards;
  std::vector<ShardPointers> pointers;
  for (int r = 0; r < 4; ++r) {
    shards.push_back(gpu::upload_shard(p, r, ring.device(), q, k, v));
    pointers.push_back(shards.back().pointers());
  }
  std::vector<std::vector<float>> first(4), lse(4);
  ring.forward_all(pointers, nullptr);
  ring.synchronize();
  for (int r = 0; r < 4; ++r) gpu::download_outputs(p, shards[r], first[r], lse[r]);
  for (int r = 0; r < 4; ++r) gpu::poison_outputs(p, shards[r]);
  ring.forward_all(pointers, nullptr);
  ring.synchronize();
  for (int r = 0; r < 4; ++r) {
    std::vector<float> again, again_lse;
    gpu::download_outputs(p, shards[r], again, again_lse);
    ASSERT_EQ(again.size(), first[r].size());
    for (size_t i = 0; i < again.size(); ++i)
      ASSERT_EQ(again[i], first[r][i]) << "rank " << r << " out[" << i << "] differs between runs";
  }
}

TEST(GpuRing, ForwardAllRejectsWrongShardCount) {
  CPGEN_REQUIRE_GPU();
  Problem p;
  p.q_heads = 2;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.seq_len = 128;
  p.cp_size = 2;
  RingAttention ring = RingAttention::loopback(p);
  ShardPointers one{};
  try {
    ring.forward_all({&one, 1}, nullptr);
    FAIL() << "one shard for cp_size 2 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("cp_size 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cpgen
