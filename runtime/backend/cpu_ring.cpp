#include "runtime/backend/cpu_ring.h"

#include <string>

#include "cpgen/error.h"
#include "runtime/transport/cpu_transport.h"
#include "runtime/ring/partition.h"

namespace cpgen {

CpuRingResult run_cpu_ring(const RingLayout& layout, const std::vector<float>& q,
                           const std::vector<float>& k, const std::vector<float>& v,
                           const std::vector<float>& dout, bool backward,
                           std::chrono::milliseconds watchdog) {
  const AttentionShape& s = layout.shape;
  check_attention_shape(s);
  if (layout.cp_size < 1)
    throw_bad_input("CPU ring: cp_size must be >= 1; got " + std::to_string(layout.cp_size));
  if (!s.cu_seqlens.empty() && s.cu_seqlens.back() != layout.seq_len)
    throw_bad_input("CPU ring: the documents end at " + std::to_string(s.cu_seqlens.back()) +
                    "; seq_len is " + std::to_string(layout.seq_len));
  const std::vector<int64_t> docs = layout.documents();
  const int n = layout.cp_size;
  const int64_t seq = layout.seq_len, dim = s.head_dim;
  const auto expect = [](const std::vector<float>& t, int64_t want, const char* name) {
    if (static_cast<int64_t>(t.size()) != want)
      throw_bad_input(std::string("CPU ring: ") + name + " has " + std::to_string(t.size()) +
                      " elements; [batch, heads, seq_len, head_dim] needs " +
                      std::to_string(want));
  };
  expect(q, s.batch * s.q_heads * seq * dim, "q");
  expect(k, s.batch * s.kv_heads * seq * dim, "k");
  expect(v, s.batch * s.kv_heads * seq * dim, "v");
  if (backward) expect(dout, s.batch * s.q_heads * seq * dim, "dout");

  CpuRingResult result;
  result.ranks.resize(n);
  for (int r = 0; r < n; ++r) {
    RankTensors& t = result.ranks[r];
    t.q = scatter_shard(q, s.batch, s.q_heads, seq, dim, layout.scheme, n, r, docs);
    t.k = scatter_shard(k, s.batch, s.kv_heads, seq, dim, layout.scheme, n, r, docs);
    t.v = scatter_shard(v, s.batch, s.kv_heads, seq, dim, layout.scheme, n, r, docs);
    if (backward) t.dout = scatter_shard(dout, s.batch, s.q_heads, seq, dim, layout.scheme, n, r, docs);
  }
  run_ring_threads(
      n,
      [&](int rank, Transport& transport) {
        CpuBackend backend(layout, rank, result.ranks[rank]);
        ring_forward(backend, transport);
        if (backward) ring_backward(backend, transport);
      },
      watchdog);

  const auto gather = [&](std::vector<float> RankTensors::*member, int64_t heads, int64_t d) {
    std::vector<std::vector<float>> shards;
    for (RankTensors& t : result.ranks) shards.push_back(t.*member);
    return gather_shards(shards, s.batch, heads, seq, d, layout.scheme, n, docs);
  };
  result.out = gather(&RankTensors::out, s.q_heads, dim);
  result.lse = gather(&RankTensors::lse, s.q_heads, 1);
  if (backward) {
    result.dq = gather(&RankTensors::dq, s.q_heads, dim);
    result.dk = gather(&RankTensors::dk, s.kv_heads, dim);
    result.dv = gather(&RankTensors::dv, s.kv_heads, dim);
  }
  return result;
}

}  // namespace cpgen
