#include "runtime/api/gpu_bench.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "cpgen/error.h"
#include "cpgen/ring_attention.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/backend/gpu_device.h"
#include "runtime/backend/kernel_ring_backend.h"
#include "runtime/api/gpu_ring_run.h"
#include "runtime/cuda/gpu_stream.h"
#include "runtime/core/half_convert.h"
#include "runtime/api/kernel_select.h"
#include "runtime/cuda/module.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/reference.h"
#include "runtime/ring/ring_driver.h"
#include "runtime/ring/vectors.h"
#include "cache/workload.h"
#include "tuner/event_timing.h"
#include "tuner/sample_stats.h"

namespace cpgen::gpu {
namespace {

std::vector<float> random_inputs(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& v : values) v = bf16_to_float(float_to_bf16(dist(rng)));
  return values;
}

// Times `body` (which enqueues on `stream`) with events: the median of `iterations` runs enqueued
// back to back (tuner/event_timing.h), as the tuner takes it (tuner/sample_stats.h: the mean of the
// middle two of an even count). Waiting for each run before enqueueing the next would leave
// the GPU idle while the host enqueues, and time that too: for a ring of N virtual ranks that is
// hundreds of driver calls per run, which at small shapes outweighs the kernels.
template <typename Body>
double time_ms(CUstream stream, int warmup, int iterations, Body&& body) {
  return median_of(time_launches_ms(stream, warmup, iterations, [&](int) { body(); }));
}

std::vector<int64_t> iota_positions(int64_t n) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  return p;
}

// Every (rank, step) launch of the forward ring alone, in the ring's order for each rank (so each
// merges into the state the rank's earlier steps left), on the chunk the exchange would have put
// in its slot: the source rank's own K and V, copied in first. A backend of its own per rank, on
// the ring's kernels per step type. Rank 0's step 0 (its own chunk) is also r.step_ms.
void time_steps_alone(const Problem& p, const RingAttention& ring, const std::vector<DeviceShard>& shards,
                      const std::vector<ShardPointers>& pointers, CUstream stream, const BenchOptions& o,
                      BenchResult& r) {
  std::vector<std::pair<StepType, KernelSpec>> per_step;
  for (const StepKernelChoice& c : ring.step_kernels())
    per_step.push_back({parse_step_type(c.step_type), KernelSpec::parse(c.kernel_uri)});
  StepKernel kernel(per_step, device_arch(ring.device()), ring.device());
  GpuDevice gpu(ring.device(), kernel);
  gpu.set_stream(stream);
  RingPositions positions(p, gpu);
  const int n = static_cast<int>(p.cp_size);
  for (int rank = 0; rank < n; ++rank) {
    KernelRingBackend backend(p, rank, gpu, positions);
    const ShardPointers& sp = pointers[rank];
    backend.bind({sp.q, sp.k, sp.v, sp.out, sp.lse});
    backend.forward_begin();
    for (int s = 0; s < n; ++s) {
      const RingStep step = make_step(rank, s, n);
      if (!backend.launches_forward(step)) continue;
      if (s > 0) {
        const std::vector<BufferView> slot = backend.kv_buffers(step.kv_slot);
        const DeviceShard& source = shards[step.kv_rank];
        gpu.copy(slot.at(0).data, source.k.as<void>(), std::min(slot.at(0).bytes, source.k.bytes()));
        gpu.copy(slot.at(1).data, source.v.as<void>(), std::min(slot.at(1).bytes, source.v.bytes()));
      }
      const double ms = time_ms(stream, o.warmup, o.iterations, [&] { backend.forward_step(step); });
      if (rank == 0 && s == 0) r.step_ms = ms;
      const StepType type = step_type_at(p, rank, s);
      const std::string name(step_type_name(type));
      auto it = std::find_if(r.step_types.begin(), r.step_types.end(),
                             [&](const StepTypeTimes& t) { return t.step_type == name; });
      if (it == r.step_types.end()) {
        r.step_types.push_back({name, kernel.spec(type).uri(), 0, 0});
        it = r.step_types.end() - 1;
      }
      ++it->launches;
      it->ms += ms;
      r.steps_alone_ms += ms;
    }
  }
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

double time_on_stream_ms(CUstream stream, int warmup, int iterations, const std::function<void()>& enqueue) {
  return time_ms(stream, warmup, iterations, enqueue);
}

BenchInputs bench_inputs(const Problem& p, uint32_t seed) {
  const size_t q_count = static_cast<size_t>(p.batch * p.q_heads * p.seq_len * p.head_dim);
  const size_t kv_count = static_cast<size_t>(p.batch * p.kv_heads * p.seq_len * p.head_dim);
  return {random_inputs(q_count, seed), random_inputs(kv_count, seed + 1), random_inputs(kv_count, seed + 2)};
}

std::vector<float> bench_dout(const Problem& p, uint32_t seed) {
  return random_inputs(static_cast<size_t>(p.batch * p.q_heads * p.seq_len * p.head_dim), seed + 3);
}

std::vector<int64_t> check_positions(int64_t seq_len, int count) {
  std::vector<int64_t> rows;
  count = std::max(2, count);
  for (int i = 0; i < count; ++i) rows.push_back(std::min<int64_t>(seq_len - 1, i * (seq_len - 1) / (count - 1)));
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

void SliceErrors::add(const SliceErrors& o) {
  sq_diff += o.sq_diff;
  sq_ref += o.sq_ref;
  lse_max = std::isnan(o.lse_max) || std::isnan(lse_max) ? NAN : std::max(lse_max, o.lse_max);
  rows += o.rows;
  nonfinite += o.nonfinite;
}

double SliceErrors::relative() const { return sq_ref > 0 ? std::sqrt(sq_diff / sq_ref) : std::sqrt(sq_diff); }

bool SliceErrors::passed() const { return rows > 0 && relative() <= 2e-2 && lse_max <= 2e-2 && nonfinite == 0; }

SliceErrors check_slice(const Problem& p, const BenchInputs& in, const std::vector<std::vector<float>>& outs,
                        const std::vector<std::vector<float>>& lses, int rank,
                        const std::vector<int64_t>& positions) {
  const int n = static_cast<int>(p.cp_size);
  const int64_t s = p.seq_len, hd = p.head_dim, local = p.local_seq_len();
  std::vector<int64_t> rows;
  std::vector<PositionOwner> owners;
  for (int64_t pos : positions) {
    PositionOwner owner = position_owner(p.scheme, s, n, pos);
    if (rank >= 0 && owner.rank != rank) continue;
    rows.push_back(pos);
    owners.push_back(owner);
  }
  SliceErrors e;
  // Every element of the checked ranks' outputs, not only the sampled rows: an unwritten one keeps
  // its NaN poison wherever it is.
  for (int r = 0; r < static_cast<int>(outs.size()); ++r) {
    if (rank >= 0 && r != rank) continue;
    for (const std::vector<float>* t : {&outs[r], &lses.at(r)})
      for (float x : *t) e.nonfinite += !std::isfinite(x);
  }
  if (rows.empty()) return e;
  // The first and the last batch (a batch stride gone wrong shows in the last), the first and the
  // last query head of each.
  std::vector<std::pair<int64_t, int64_t>> slices;  // (batch, head)
  for (int64_t batch : {int64_t{0}, p.batch - 1})
    for (int64_t head : {int64_t{0}, p.q_heads - 1})
      if (std::find(slices.begin(), slices.end(), std::pair{batch, head}) == slices.end()) slices.push_back({batch, head});
  for (const auto& [batch, head] : slices) {
    const int64_t kv_slice = batch * p.kv_heads + head / p.gqa_group(), q_slice = batch * p.q_heads + head;
    std::vector<double> qs, ks(in.k.begin() + kv_slice * s * hd, in.k.begin() + (kv_slice + 1) * s * hd),
        vs(in.v.begin() + kv_slice * s * hd, in.v.begin() + (kv_slice + 1) * s * hd);
    for (int64_t row : rows)
      qs.insert(qs.end(), in.q.begin() + (q_slice * s + row) * hd, in.q.begin() + (q_slice * s + row + 1) * hd);
    AttentionShape shape = attention_shape_of(p);  // the problem's mask, on one (batch, head) slice
    shape.batch = shape.q_heads = shape.kv_heads = 1;
    ReferenceForward ref = reference_forward(shape, qs, ks, vs, rows, iota_positions(s));
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::vector<float>& out = outs.at(owners[i].rank);
      const size_t at = static_cast<size_t>(q_slice * local + owners[i].local_index);
      for (int64_t d = 0; d < hd; ++d) {
        const double diff = out.at(at * hd + d) - ref.out[i * hd + d];
        e.sq_diff += diff * diff;
        e.sq_ref += ref.out[i * hd + d] * ref.out[i * hd + d];
      }
      const double lse_err = std::abs(lses.at(owners[i].rank).at(at) - ref.lse[i]);
      e.lse_max = std::isnan(lse_err) || std::isnan(e.lse_max) ? NAN : std::max(e.lse_max, lse_err);
      ++e.rows;
    }
  }
  if (std::isnan(e.sq_diff)) e.lse_max = NAN;
  return e;
}

double time_single_attention(const Problem& p, const BenchInputs& in, const BenchOptions& o, std::string* kernel_uri) {
  Problem single = p;
  single.cp_size = 1;
  single.scheme = Scheme::kContiguous;
  RingOptions options;
  options.device = o.device;
  RingAttention one = RingAttention::loopback(single, options);
  if (kernel_uri) *kernel_uri = one.kernel_uri();
  DeviceShard shard = upload_shard(single, 0, one.device(), in.q, in.k, in.v);
  const ShardPointers sp = shard.pointers();
  Stream stream;
  return time_ms(stream.get(), o.warmup, o.iterations,
                 [&] { one.forward(sp.q, sp.k, sp.v, sp.out, sp.lse, stream.get()); });
}

BenchResult bench_loopback(const Problem& p, const BenchOptions& o) {
  p.validate();
  // Its useful FLOPs and checked rows are those of a causal or full attention over one sequence;
  // a softcap changes neither (the check applies it).
  if (kernel_needs_key_intervals(p))
    throw_bad_input("bench: " + p.name + " has documents or a window; the ring benchmark times causal and full "
                    "attention only (with or without a softcap)");
  cu::driver();  // kNoDevice, with the reason, before any allocation
  const int n = static_cast<int>(p.cp_size);
  const int64_t s = p.seq_len, hd = p.head_dim;
  const BenchInputs in = bench_inputs(p, o.seed);
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
    shards.push_back(upload_shard(p, rank, ring.device(), in.q, in.k, in.v));
    pointers.push_back(shards.back().pointers());
  }
  r.ring_ms = time_ms(stream.get(), o.warmup, o.iterations, [&] { ring.forward_all(pointers, stream.get()); });
  r.useful_flops = per_pair * visible_pairs(iota_positions(s), iota_positions(s), p.causal);
  r.ring_tflops = r.useful_flops / (r.ring_ms * 1e-3) / 1e12;

  // Check a slice of the ring's output on fresh poison (the inputs are the same every run).
  for (auto& shard : shards) poison_outputs(p, shard);
  ring.forward_all(pointers, stream.get());
  ring.synchronize();
  std::vector<std::vector<float>> outs(n), lses(n);
  for (int rank = 0; rank < n; ++rank) download_outputs(p, shards[rank], outs[rank], lses[rank]);
  const SliceErrors errors = check_slice(p, in, outs, lses, -1, check_positions(s, o.check_rows));
  r.checked_rows = errors.rows;
  r.check_nonfinite = errors.nonfinite;
  r.check_out_error = errors.relative();
  r.check_lse_error = errors.lse_max;
  r.check_passed = errors.passed();

  // Each launch of the ring alone, rank 0's step 0 among them.
  time_steps_alone(p, ring, shards, pointers, stream.get(), o, r);
  const std::vector<int64_t> own = partition_positions(p.scheme, s, n, 0, p.documents);
  r.step_flops = per_pair * visible_pairs(own, own, p.causal);
  r.step_tflops = r.step_ms > 0 ? r.step_flops / (r.step_ms * 1e-3) / 1e12 : 0;

  // Backward: on the forward's out and lse as the last forward left them (the inputs are the
  // same every run, so every backward computes the same gradients).
  const std::vector<float> dout = bench_dout(p, o.seed);
  std::vector<BackwardShardPointers> backward;
  for (int rank = 0; rank < n; ++rank) {
    upload_backward(p, rank, dout, shards[rank]);
    backward.push_back(shards[rank].backward_pointers());
  }
  ring.backward_all(backward, stream.get());  // loads the backward kernels, outside the timing
  ring.synchronize();
  r.backward_kernel_uri = ring.backward_step_kernels().front().kernel_uri;
  r.backward_ms = time_ms(stream.get(), o.warmup, o.iterations, [&] { ring.backward_all(backward, stream.get()); });
  r.fwd_bwd_ms = time_ms(stream.get(), o.warmup, o.iterations, [&] {
    ring.forward_all(pointers, stream.get());
    ring.backward_all(backward, stream.get());
  });
  r.backward_tflops = kBackwardFlopsFactor * r.useful_flops / (r.backward_ms * 1e-3) / 1e12;
  r.fwd_bwd_tflops = (1 + kBackwardFlopsFactor) * r.useful_flops / (r.fwd_bwd_ms * 1e-3) / 1e12;
  for (auto& shard : shards) {
    shard.dq.poison();
    shard.dk.poison();
    shard.dv.poison();
  }
  ring.backward_all(backward, stream.get());
  ring.synchronize();
  r.grads_finite = true;
  for (int rank = 0; rank < n; ++rank) {
    std::vector<float> dq, dk, dv;
    download_grads(p, shards[rank], dq, dk, dv);
    for (const auto* g : {&dq, &dk, &dv})
      for (float x : *g) r.grads_finite = r.grads_finite && std::isfinite(x);
  }

  r.single_ms = time_single_attention(p, in, o, &r.single_kernel_uri);
  r.single_tflops = r.useful_flops / (r.single_ms * 1e-3) / 1e12;
  r.overhead = r.ring_ms / r.single_ms - 1;
  return r;
}

}  // namespace cpgen::gpu
