// A ring object embedded in a training step: calls on two streams, CUDA graph capture and replay,
// and batch * kv_heads past grid.y's 65535, each against the float64 reference. GPU only.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cpgen/error.h"
#include "cpgen/ring_attention.h"
#include "runtime/api/gpu_ring_run.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/gpu_stream.h"
#include "runtime/cuda/module.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/reference.h"
#include "test_util.h"
#include "tests/runtime/api/gpu_ring_check.h"

namespace cpgen {
namespace {

// One problem's inputs on every virtual rank, and what the float64 reference says of them.
struct Case {
  Problem p;
  std::vector<float> q, k, v;
  ReferenceForward want;
  std::vector<gpu::DeviceShard> shards;
  std::vector<ShardPointers> pointers;

  Case(const Problem& problem, uint32_t seed, int device) : p(problem) {
    const int64_t qn = p.batch * p.q_heads * p.seq_len * p.head_dim;
    const int64_t kn = p.batch * p.kv_heads * p.seq_len * p.head_dim;
    q = testing::random_bf16_exact(qn, seed);
    k = testing::random_bf16_exact(kn, seed + 1);
    v = testing::random_bf16_exact(kn, seed + 2);
    AttentionShape shape{.batch = p.batch, .q_heads = p.q_heads, .kv_heads = p.kv_heads, .head_dim = p.head_dim, .scale = p.scale(), .causal = p.causal};
    std::vector<int64_t> positions(p.seq_len);
    for (int64_t i = 0; i < p.seq_len; ++i) positions[i] = i;
    want = reference_forward(shape, testing::to_double(q), testing::to_double(k), testing::to_double(v),
                             positions, positions);
    for (int r = 0; r < p.cp_size; ++r) {
      shards.push_back(gpu::upload_shard(p, r, device, q, k, v));
      pointers.push_back(shards.back().pointers());
    }
  }
  void poison() {
    for (auto& s : shards) gpu::poison_outputs(p, s);
  }
  void check(const std::string& what) {
    const int n = static_cast<int>(p.cp_size);
    std::vector<std::vector<float>> outs(n), lses(n);
    for (int r = 0; r < n; ++r) gpu::download_outputs(p, shards[r], outs[r], lses[r]);
    testing::expect_close_to(gather_shards(outs, p.batch, p.q_heads, p.seq_len, p.head_dim, p.scheme, n, p.documents),
                             gather_shards(lses, p.batch, p.q_heads, p.seq_len, 1, p.scheme, n, p.documents), want.out,
                             want.lse, p.head_dim, what);
  }
};

Problem ring_problem() {
  Problem p;
  p.batch = 2;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 128;
  p.seq_len = 2048;
  p.cp_size = 4;
  return p;
}

void sync(CUstream s) { CPGEN_CU_CHECK(cu::driver().cuStreamSynchronize(s)); }

// The second call, on another stream, is queued while the first's steps still run on the GPU; it
// overwrites the ring's K/V slots and running state. Without the wait on the first call's
// completion event, both results would mix.
TEST(GpuRingStreams, TwoStreamsOneRingDoNotRace) {
  CPGEN_REQUIRE_GPU();
  RingAttention ring = RingAttention::loopback(ring_problem());
  Case a(ring_problem(), 100, ring.device()), b(ring_problem(), 200, ring.device());
  gpu::Stream s1, s2;
  for (int round = 0; round < 3; ++round) {
    a.poison();
    b.poison();
    ring.forward_all(a.pointers, s1.get());
    ring.forward_all(b.pointers, s2.get());
    ring.forward_all(a.pointers, s1.get());  // and back: s1 waits for s2's call
    sync(s1.get());
    sync(s2.get());
    a.check("stream 1, round " + std::to_string(round) + ", kernel " + ring.kernel_uri());
    b.check("stream 2, round " + std::to_string(round) + ", kernel " + ring.kernel_uri());
  }
}

// Captures two forwards into one graph and replays it twice against the reference.
TEST(GpuRingStreams, LoopbackForwardsCapturedIntoAGraphReplay) {
  CPGEN_REQUIRE_GPU();
  RingAttention ring = RingAttention::loopback(ring_problem());
  Case a(ring_problem(), 300, ring.device()), b(ring_problem(), 400, ring.device());
  const cu::DriverApi& api = cu::driver();
  gpu::Stream s;
  ring.forward_all(a.pointers, s.get());  // the first call creates the ring's events
  ring.synchronize();
  CPGEN_CU_CHECK(api.cuStreamBeginCapture(s.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  ring.forward_all(a.pointers, s.get());
  ring.forward_all(b.pointers, s.get());
  CUgraph graph = nullptr;
  CPGEN_CU_CHECK(api.cuStreamEndCapture(s.get(), &graph));
  CUgraphExec exec = nullptr;
  CPGEN_CU_CHECK(api.cuGraphInstantiateWithFlags(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    a.poison();
    b.poison();
    CPGEN_CU_CHECK(api.cuGraphLaunch(exec, s.get()));
    sync(s.get());
    a.check("graph replay " + std::to_string(replay) + ", first forward");
    b.check("graph replay " + std::to_string(replay) + ", second forward");
  }
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
}

TEST(GpuRingStreams, CapturingTheFirstLoopbackForwardIsRefused) {
  CPGEN_REQUIRE_GPU();
  RingAttention ring = RingAttention::loopback(ring_problem());
  Case a(ring_problem(), 500, ring.device());
  const cu::DriverApi& api = cu::driver();
  gpu::Stream s;
  CPGEN_CU_CHECK(api.cuStreamBeginCapture(s.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  std::string message;
  try {
    ring.forward_all(a.pointers, s.get());
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    message = e.what();
  }
  CUgraph graph = nullptr;
  api.cuStreamEndCapture(s.get(), &graph);
  if (graph) api.cuGraphDestroy(graph);
  EXPECT_NE(message.find("first forward"), std::string::npos) << "not refused: '" << message << "'";
}

// batch * kv_heads = 65600 pairs: grid.y alone cannot hold them, the launcher folds them into z.
TEST(GpuRingStreams, BatchTimesKvHeadsAbove65535) {
  CPGEN_REQUIRE_GPU();
  Problem p;
  p.batch = 4100;
  p.q_heads = 16;
  p.kv_heads = 16;
  p.head_dim = 64;
  p.seq_len = 16;
  p.cp_size = 2;
  RingAttention ring = RingAttention::loopback(p);
  Case c(p, 600, ring.device());
  ring.forward_all(c.pointers, nullptr);
  ring.synchronize();
  c.check("batch 4100 x kv_heads 16, kernel " + ring.kernel_uri());
}

}  // namespace
}  // namespace cpgen
