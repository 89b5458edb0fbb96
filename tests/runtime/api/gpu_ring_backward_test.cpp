// The backward ring on one GPU through the loopback transport: every ring size, scheme and dtype
// against the vectors' gradients, GQA and head dims against the float64 reference, repeated runs,
// and the argument checks of backward and backward_all. GPU only (skips without a device).
#include <gtest/gtest.h>

#include "cpgen/error.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/gpu_stream.h"
#include "cpgen/ring_attention.h"
#include "runtime/api/gpu_ring_run.h"
#include "runtime/core/attention_shape.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/reference.h"
#include "runtime/ring/vectors.h"
#include "test_util.h"
#include "tests/runtime/api/gpu_ring_check.h"

namespace cpgen {
namespace {

using testing::expect_grads_close;
using testing::as_float;
using testing::partitionable;

constexpr Scheme kSchemes[] = {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken, Scheme::kStriped};
constexpr Dtype kDtypes[] = {Dtype::kBf16, Dtype::kFp16};

TEST(GpuRingBackward, LoopbackMatchesVectorGradientsForEveryRingSizeSchemeAndDtype) {
  CPGEN_REQUIRE_GPU();
  int runs = 0;
  for (const std::string& file : testing::vector_files()) {
    AttentionVectors vec = load_attention_vectors(file);
    if (vec.dq.empty()) continue;
    const std::vector<float> q = as_float(vec.q), k = as_float(vec.k), v = as_float(vec.v);
    const std::vector<float> dout = as_float(vec.dout);
    for (int n : {1, 2, 4, 8})
      for (Scheme scheme : kSchemes) {
        if (!partitionable(scheme, vec.seq_len, n)) continue;
        for (Dtype dtype : kDtypes) {
          const Problem p = problem_from_vectors(vec, n, scheme, dtype);
          gpu::GpuRingResult r = gpu::run_gpu_ring_loopback(p, q, k, v, {}, &dout);
          expect_grads_close(r.dq, r.dk, r.dv, vec.dq, vec.dk, vec.dv,
                             vec.name + " N=" + std::to_string(n) + " " + std::string(scheme_name(scheme)) + " " +
                                 std::string(dtype_name(dtype)) + " kernel " + r.backward_kernel_uri);
          ++runs;
        }
      }
  }
  EXPECT_GT(runs, 100) << "too few ring configurations were checked";
}

// Issue 11 on the GPU: every format-2 file (packed documents of any length, two-sided windows,
// softcap) through the loopback ring, forward and backward, bf16 and fp16, zigzag rings of 2 and
// 3 and a striped ring of 2 (none of the lengths divides: unequal shards).
TEST(GpuRingBackward, LoopbackReproducesFormatTwoVectors) {
  CPGEN_REQUIRE_GPU();
  int runs = 0;
  for (const std::string& file : testing::vector_files_v2()) {
    const AttentionVectors vec = load_attention_vectors(file);
    const std::vector<float> q = as_float(vec.q), k = as_float(vec.k), v = as_float(vec.v);
    const std::vector<float> dout = as_float(vec.dout);
    struct Ring {
      int n;
      Scheme scheme;
    };
    for (const Ring ring : {Ring{2, Scheme::kZigzag}, Ring{3, Scheme::kZigzag}, Ring{2, Scheme::kStriped}})
      for (Dtype dtype : kDtypes) {
        const Problem p = problem_from_vectors(vec, ring.n, ring.scheme, dtype);
        gpu::GpuRingResult r = gpu::run_gpu_ring_loopback(p, q, k, v, {}, &dout);
        const std::string what = vec.name + " N=" + std::to_string(ring.n) + " " +
                                 std::string(scheme_name(ring.scheme)) + " " + std::string(dtype_name(dtype)) +
                                 " kernel " + r.backward_kernel_uri;
        expect_grads_close(r.dq, r.dk, r.dv, vec.dq, vec.dk, vec.dv, what);
        ++runs;
      }
  }
  EXPECT_GT(runs, 0) << "no format-2 vectors found";
}

// GQA 1/4 and head dims 64/128/256 against the float64 reference of the full sequence.
TEST(GpuRingBackward, LoopbackMatchesReferenceForGqaAndHeadDims) {
  CPGEN_REQUIRE_GPU();
  uint32_t seed = 101;
  for (int hd : {64, 128, 256})
    for (int group : {1, 4})
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
        const std::vector<float> dout = testing::random_bf16_exact(qn, seed++);
        const AttentionShape shape = attention_shape_of(p);  // p.causal is causal; no window
        std::vector<int64_t> positions(p.seq_len);
        for (int64_t i = 0; i < p.seq_len; ++i) positions[i] = i;
        const ReferenceForward fwd = reference_forward(shape, testing::to_double(q), testing::to_double(k),
                                                       testing::to_double(v), positions, positions);
        const ReferenceGrads ref =
            reference_backward(shape, testing::to_double(q), testing::to_double(k), testing::to_double(v), fwd.out,
                               testing::to_double(dout), fwd.lse, positions, positions);
        for (int n : {1, 2, 4, 8})
          for (Dtype dtype : kDtypes) {
            p.cp_size = n;
            p.scheme = Scheme::kZigzag;
            p.dtype = dtype;
            gpu::GpuRingResult r = gpu::run_gpu_ring_loopback(p, q, k, v, {}, &dout);
            expect_grads_close(r.dq, r.dk, r.dv, ref.dq, ref.dk, ref.dv,
                               "hd" + std::to_string(hd) + " gqa" + std::to_string(group) +
                                   (causal ? " causal" : " full") + " N=" + std::to_string(n) + " " +
                                   std::string(dtype_name(dtype)) + " kernel " + r.backward_kernel_uri);
          }
      }
}

// A second backward on the same ring reuses the dK/dV accumulators: it must start from the
// chunk's first step again (write mode), not add to the first run's sums.
TEST(GpuRingBackward, RepeatedBackwardGivesTheSameGradients) {
  CPGEN_REQUIRE_GPU();
  Problem p;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.head_dim = 128;
  p.seq_len = 512;
  p.cp_size = 4;
  const size_t qn = p.q_heads * p.seq_len * 128, kn = p.kv_heads * p.seq_len * 128;
  const std::vector<float> q = testing::random_bf16_exact(qn, 21), k = testing::random_bf16_exact(kn, 22),
                           v = testing::random_bf16_exact(kn, 23), dout = testing::random_bf16_exact(qn, 24);
  RingAttention ring = RingAttention::loopback(p);
  std::vector<gpu::DeviceShard> shards;
  std::vector<ShardPointers> forward;
  std::vector<BackwardShardPointers> backward;
  for (int r = 0; r < 4; ++r) {
    shards.push_back(gpu::upload_shard(p, r, ring.device(), q, k, v));
    forward.push_back(shards.back().pointers());
  }
  ring.forward_all(forward, nullptr);
  for (int r = 0; r < 4; ++r) {
    gpu::upload_backward(p, r, dout, shards[r]);
    backward.push_back(shards[r].backward_pointers());
  }
  ring.backward_all(backward, nullptr);
  ring.synchronize();
  std::vector<std::vector<float>> dq(4), dk(4), dv(4);
  for (int r = 0; r < 4; ++r) gpu::download_grads(p, shards[r], dq[r], dk[r], dv[r]);
  for (int r = 0; r < 4; ++r) {
    shards[r].dq.poison();
    shards[r].dk.poison();
    shards[r].dv.poison();
  }
  ring.backward_all(backward, nullptr);
  ring.synchronize();
  for (int r = 0; r < 4; ++r) {
    std::vector<float> again_dq, again_dk, again_dv;
    gpu::download_grads(p, shards[r], again_dq, again_dk, again_dv);
    EXPECT_EQ(again_dk, dk[r]) << "rank " << r << ": dk differs between runs";
    EXPECT_EQ(again_dv, dv[r]) << "rank " << r << ": dv differs between runs";
    // dQ is summed with fp32 atomics, whose order may differ; compare within rounding.
    ASSERT_EQ(again_dq.size(), dq[r].size());
    for (size_t i = 0; i < dq[r].size(); ++i)
      ASSERT_NEAR(again_dq[i], dq[r][i], 1e-2 * (1 + std::abs(dq[r][i]))) << "rank " << r << " dq[" << i << "]";
  }
}

// After one uncaptured forward and backward, a forward + backward is captured into a graph and
// replayed twice; each replay's gradients match the reference. Capturing the very first backward
// is refused (it loads kernels and allocates).
TEST(GpuRingBackward, LoopbackBackwardCapturedIntoAGraphReplay) {
  CPGEN_REQUIRE_GPU();
  Problem p;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.seq_len = 512;
  p.cp_size = 4;
  const size_t qn = p.q_heads * p.seq_len * 64, kn = p.kv_heads * p.seq_len * 64;
  const std::vector<float> q = testing::random_bf16_exact(qn, 31), k = testing::random_bf16_exact(kn, 32),
                           v = testing::random_bf16_exact(kn, 33), dout = testing::random_bf16_exact(qn, 34);
  const AttentionShape shape = attention_shape_of(p);
  std::vector<int64_t> positions(p.seq_len);
  for (int64_t i = 0; i < p.seq_len; ++i) positions[i] = i;
  const ReferenceForward fwd = reference_forward(shape, testing::to_double(q), testing::to_double(k),
                                                 testing::to_double(v), positions, positions);
  const ReferenceGrads ref = reference_backward(shape, testing::to_double(q), testing::to_double(k),
                                                testing::to_double(v), fwd.out, testing::to_double(dout), fwd.lse,
                                                positions, positions);
  RingAttention ring = RingAttention::loopback(p);
  std::vector<gpu::DeviceShard> shards;
  std::vector<ShardPointers> forward;
  std::vector<BackwardShardPointers> backward;
  for (int r = 0; r < 4; ++r) {
    shards.push_back(gpu::upload_shard(p, r, ring.device(), q, k, v));
    gpu::upload_backward(p, r, dout, shards.back());
    forward.push_back(shards.back().pointers());
    backward.push_back(shards.back().backward_pointers());
  }
  const cu::DriverApi& api = cu::driver();
  gpu::Stream s;
  ring.forward_all(forward, s.get());
  ring.synchronize();
  // The first backward, captured: refused with kBadInput, and nothing queued.
  CPGEN_CU_CHECK(api.cuStreamBeginCapture(s.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  std::string message;
  try {
    ring.backward_all(backward, s.get());
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    message = e.what();
  }
  CUgraph refused = nullptr;
  api.cuStreamEndCapture(s.get(), &refused);
  if (refused) api.cuGraphDestroy(refused);
  EXPECT_NE(message.find("first backward"), std::string::npos) << "not refused: '" << message << "'";

  ring.backward_all(backward, s.get());
  ring.synchronize();
  CPGEN_CU_CHECK(api.cuStreamBeginCapture(s.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  ring.forward_all(forward, s.get());
  ring.backward_all(backward, s.get());
  CUgraph graph = nullptr;
  CPGEN_CU_CHECK(api.cuStreamEndCapture(s.get(), &graph));
  CUgraphExec exec = nullptr;
  CPGEN_CU_CHECK(api.cuGraphInstantiateWithFlags(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    for (auto& shard : shards) {
      shard.dq.poison();
      shard.dk.poison();
      shard.dv.poison();
    }
    CPGEN_CU_CHECK(api.cuGraphLaunch(exec, s.get()));
    CPGEN_CU_CHECK(api.cuStreamSynchronize(s.get()));
    std::vector<std::vector<float>> dq(4), dk(4), dv(4);
    for (int r = 0; r < 4; ++r) gpu::download_grads(p, shards[r], dq[r], dk[r], dv[r]);
    expect_grads_close(gather_shards(dq, p.batch, p.q_heads, p.seq_len, p.head_dim, p.scheme, 4, p.documents),
                       gather_shards(dk, p.batch, p.kv_heads, p.seq_len, p.head_dim, p.scheme, 4, p.documents),
                       gather_shards(dv, p.batch, p.kv_heads, p.seq_len, p.head_dim, p.scheme, 4, p.documents), ref.dq, ref.dk,
                       ref.dv, "graph replay " + std::to_string(replay));
  }
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
}

TEST(GpuRingBackward, BackwardAllRejectsWrongShardCountAndNcclCalls) {
  CPGEN_REQUIRE_GPU();
  Problem p;
  p.q_heads = 2;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.seq_len = 128;
  p.cp_size = 2;
  RingAttention ring = RingAttention::loopback(p);
  std::vector<BackwardShardPointers> one(1);
  try {
    ring.backward_all(one, nullptr);
    FAIL() << "one shard for cp_size 2 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("got 1 shards for cp_size 2"), std::string::npos) << e.what();
  }
  try {
    ring.backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    FAIL() << "backward on a loopback ring of cp_size 2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("call backward_all"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cpgen
