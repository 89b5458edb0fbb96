#include "runtime/gpu_bench.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "cpgen/error.h"
#include "cpgen/ring_attention.h"
#include "runtime/cuda_driver.h"
#include "runtime/gpu_backend.h"
#include "runtime/gpu_ring_run.h"
#include "runtime/gpu_stream.h"
#include "runtime/half_convert.h"
#include "runtime/kernel_select.h"
#include "runtime/module.h"
#include "runtime/partition.h"
#include "runtime/reference.h"
#include "runtime/vectors.h"

namespace cpgen::gpu {
namespace {

std::vector<float> random_inputs(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& v : values) v = bf16_to_float(float_to_bf16(dist(rng)));
  return values;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Times `body` (which enqueues on `stream`) with events: the median of `iterations` runs.
template <typename Body>
double time_ms(CUstream stream, int warmup, int iterations, Body&& body) {
  const cu::DriverApi& api = cu::driver();
  for (int i = 0; i < warmup; ++i) body();
  CPGEN_CU_CHECK(api.cuStreamSynchronize(stream));
  Event start(true), stop(true);
  std::vector<double> samples;
  for (int i = 0; i < iterations; ++i) {
    start.record(stream);
    body();
    stop.record(stream);
    CPGEN_CU_CHECK(api.cuEventSynchronize(stop.get()));
    float ms = 0;
    CPGEN_CU_CHECK(api.cuEventElapsedTime(&ms, start.get(), stop.get()));
    samples.push_back(ms);
  }
  return median(samples);
}

std::vector<int64_t> iota_positions(int64_t n) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  return p;
}

}  // namespace

double visible_pairs(const std::vector<int64_t>& q, const std::vector<int64_t>& k, bool causal) {
  if (!causal) return static_cast<double>(q.size()) * static_cast<double>(k.size());
  // Both sorted: for each query, the keys at or before it.
  double pairs = 0;
  size_t j = 0;
  for (int64_t qp : q) {
    while (j < k.size() && k[j] <= qp) ++j;
    pairs += static_cast<double>(j);
  }
  return pairs;
}

BenchResult bench_loopback(const Problem& p, const BenchOptions& o) {
  p.validate();
  cu::driver();  // kNoDevice, with the reason, before any allocation
  const int n = static_cast<int>(p.cp_size);
  const int64_t s = p.seq_len, hd = p.head_dim;
  const std::vector<float> q = random_inputs(static_cast<size_t>(p.batch * p.q_heads * s * hd), o.seed);
  const std::vector<float> k = random_inputs(static_cast<size_t>(p.batch * p.kv_heads * s * hd), o.seed + 1);
  const std::vector<float> v = random_inputs(static_cast<size_t>(p.batch * p.kv_heads * s * hd), o.seed + 2);
  const double per_pair = 4.0 * static_cast<double>(hd * p.batch * p.q_heads);

  BenchResult r;
  RingOptions ring_options;
  ring_options.device = o.device;
  RingAttention ring = RingAttention::loopback(p, ring_options);
  r.kernel_uri = ring.kernel_uri();
  r.config_source = ring.config_source();
  Stream stream;
  std::vector<DeviceShard> shards;
  std::vector<ShardPointers> pointers;
  for (int rank = 0; rank < n; ++rank) {
    shards.push_back(upload_shard(p, rank, ring.device(), q, k, v));
    pointers.push_back(shards.back().pointers());
  }
  r.ring_ms = time_ms(stream.get(), o.warmup, o.iterations, [&] { ring.forward_all(pointers, stream.get()); });
  r.useful_flops = per_pair * visible_pairs(iota_positions(s), iota_positions(s), p.causal);
  r.ring_tflops = r.useful_flops / (r.ring_ms * 1e-3) / 1e12;

  // Check a slice of the ring's output (after the timed runs: the same inputs each time).
  {
    for (auto& shard : shards) poison_outputs(p, shard);
    ring.forward_all(pointers, stream.get());
    ring.synchronize();
    std::vector<std::vector<float>> outs(n), lses(n);
    for (int rank = 0; rank < n; ++rank) download_outputs(p, shards[rank], outs[rank], lses[rank]);
    std::vector<int64_t> rows;
    const int want = std::max(2, o.check_rows);
    for (int i = 0; i < want; ++i) rows.push_back(std::min<int64_t>(s - 1, i * (s - 1) / (want - 1)));
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    std::vector<double> got_out, want_out, got_lse, want_lse;
    const int64_t local = p.local_seq_len();
    for (int64_t head : {int64_t{0}, p.q_heads - 1}) {
      const int64_t kv_head = head / p.gqa_group();
      std::vector<double> qs, ks(k.begin() + kv_head * s * hd, k.begin() + (kv_head + 1) * s * hd),
          vs(v.begin() + kv_head * s * hd, v.begin() + (kv_head + 1) * s * hd);
      for (int64_t row : rows)
        qs.insert(qs.end(), q.begin() + (head * s + row) * hd, q.begin() + (head * s + row + 1) * hd);
      AttentionShape shape{1, 1, 1, hd, p.scale(), p.causal, 0};
      ReferenceForward ref = reference_forward(shape, qs, ks, vs, rows, iota_positions(s));
      want_out.insert(want_out.end(), ref.out.begin(), ref.out.end());
      want_lse.insert(want_lse.end(), ref.lse.begin(), ref.lse.end());
      for (int64_t row : rows) {
        PositionOwner owner = position_owner(p.scheme, s, n, row);
        const size_t at = static_cast<size_t>((head * local + owner.local_index));
        got_out.insert(got_out.end(), outs[owner.rank].begin() + at * hd, outs[owner.rank].begin() + (at + 1) * hd);
        got_lse.push_back(lses[owner.rank][at]);
      }
    }
    r.checked_rows = static_cast<int>(got_lse.size());
    r.check_out_error = relative_error(got_out, want_out);
    r.check_lse_error = 0;
    for (size_t i = 0; i < got_lse.size(); ++i)
      r.check_lse_error = std::max(r.check_lse_error, std::abs(got_lse[i] - want_lse[i]));
    if (std::isnan(r.check_out_error)) r.check_lse_error = NAN;
    r.check_passed = r.check_out_error <= 2e-2 && r.check_lse_error <= 2e-2;
  }

  // The step kernel alone: rank 0, step 0 (its own chunk), on a backend of its own.
  {
    const std::string arch = device_arch(ring.device());
    StepKernel kernel(KernelSpec::parse(r.kernel_uri), arch, ring.device());
    DevicePositions positions(p, ring.device());
    GpuRingBackend backend(p, 0, ring.device(), kernel, positions);
    const ShardPointers& s0 = pointers[0];
    backend.bind({s0.q, s0.k, s0.v, s0.out, s0.lse}, stream.get());
    backend.forward_begin();
    RingStep step;
    step.is_first = true;
    step.is_last = n == 1;
    r.step_ms = time_ms(stream.get(), o.warmup, o.iterations, [&] { backend.forward_step(step); });
    const std::vector<int64_t> own = partition_positions(p.scheme, s, n, 0);
    r.step_flops = per_pair * visible_pairs(own, own, p.causal);
    r.step_tflops = r.step_flops / (r.step_ms * 1e-3) / 1e12;
  }

  // One attention of the same total work: cp_size 1, the whole sequence in one launch.
  {
    Problem single = p;
    single.cp_size = 1;
    single.scheme = Scheme::kContiguous;
    RingAttention one = RingAttention::loopback(single, ring_options);
    DeviceShard shard = upload_shard(single, 0, one.device(), q, k, v);
    const ShardPointers sp = shard.pointers();
    r.single_ms = time_ms(stream.get(), o.warmup, o.iterations,
                          [&] { one.forward(sp.q, sp.k, sp.v, sp.out, sp.lse, stream.get()); });
    r.single_tflops = r.useful_flops / (r.single_ms * 1e-3) / 1e12;
  }
  r.overhead = r.ring_ms / r.single_ms - 1;
  return r;
}

}  // namespace cpgen::gpu
