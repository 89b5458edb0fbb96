#include "runtime/api/gpu_ring_run.h"

#include "cpgen/error.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/core/half_convert.h"
#include "runtime/core/layout_strides.h"
#include "runtime/ring/partition.h"

namespace cpgen::gpu {
namespace {

DeviceBuffer upload_half(int device, const std::vector<float>& values, Dtype dtype) {
  return DeviceBuffer::from_host(device, to_half(values, dtype));
}

}  // namespace

ShardPointers DeviceShard::pointers() const {
  return {q.as<void>(), k.as<void>(), v.as<void>(), out.as<void>(), lse.as<float>()};
}

BackwardShardPointers DeviceShard::backward_pointers() const {
  return {q.as<void>(),  k.as<void>(),  v.as<void>(),  out.as<void>(), lse.as<float>(),
          dout.as<void>(), dq.as<void>(), dk.as<void>(), dv.as<void>()};
}

void upload_backward(const Problem& p, int rank, const std::vector<float>& dout, DeviceShard& s) {
  const int n = static_cast<int>(p.cp_size);
  s.dout = upload_half(s.q.device(),
                       shard_to_layout(scatter_shard(dout, p.batch, p.q_heads, p.seq_len, p.head_dim, p.scheme, n,
                                                     rank, p.documents),
                                       p.layout, p.batch, p.q_heads, p.head_dim),
                       p.dtype);
  s.dq = DeviceBuffer(s.q.device(), s.q.bytes());
  s.dk = DeviceBuffer(s.q.device(), s.k.bytes());
  s.dv = DeviceBuffer(s.q.device(), s.v.bytes());
  s.dq.poison();
  s.dk.poison();
  s.dv.poison();
}

void download_grads(const Problem& p, const DeviceShard& s, std::vector<float>& dq, std::vector<float>& dk,
                    std::vector<float>& dv) {
  dq = shard_from_layout(from_half(s.dq.download_as<uint16_t>(), p.dtype), p.layout, p.batch, p.q_heads, p.head_dim);
  dk = shard_from_layout(from_half(s.dk.download_as<uint16_t>(), p.dtype), p.layout, p.batch, p.kv_heads, p.head_dim);
  dv = shard_from_layout(from_half(s.dv.download_as<uint16_t>(), p.dtype), p.layout, p.batch, p.kv_heads, p.head_dim);
}

DeviceShard upload_shard(const Problem& p, int rank, int device, const std::vector<float>& q,
                         const std::vector<float>& k, const std::vector<float>& v) {
  const int n = static_cast<int>(p.cp_size);
  auto shard_of = [&](const std::vector<float>& full, int64_t heads) {
    // In the problem's layout, as a framework in that layout hands it over.
    return shard_to_layout(scatter_shard(full, p.batch, heads, p.seq_len, p.head_dim, p.scheme, n, rank, p.documents),
                           p.layout, p.batch, heads, p.head_dim);
  };
  DeviceShard s;
  const std::vector<float> q_shard = shard_of(q, p.q_heads);
  s.q = upload_half(device, q_shard, p.dtype);
  s.k = upload_half(device, shard_of(k, p.kv_heads), p.dtype);
  s.v = upload_half(device, shard_of(v, p.kv_heads), p.dtype);
  // Ranks may hold different row counts: this rank's rows are its shard's.
  const size_t rows = q_shard.size() / static_cast<size_t>(p.head_dim);
  s.out = DeviceBuffer(device, rows * static_cast<size_t>(p.head_dim) * sizeof(uint16_t));
  s.lse = DeviceBuffer(device, rows * sizeof(float));
  poison_outputs(p, s);
  return s;
}

void poison_outputs(const Problem&, DeviceShard& shard) {
  // All-ones bytes read as NaN in bf16, fp16 and fp32.
  shard.out.poison();
  shard.lse.poison();
}

void download_outputs(const Problem& p, const DeviceShard& shard, std::vector<float>& out,
                      std::vector<float>& lse) {
  out = shard_from_layout(from_half(shard.out.download_as<uint16_t>(), p.dtype), p.layout, p.batch, p.q_heads,
                          p.head_dim);
  lse = shard.lse.download_as<float>();
}

GpuRingResult run_gpu_ring_loopback(const Problem& p, const std::vector<float>& q,
                                    const std::vector<float>& k, const std::vector<float>& v,
                                    const RingOptions& options, const std::vector<float>* dout) {
  RingAttention ring = RingAttention::loopback(p, options);
  const int n = static_cast<int>(p.cp_size);
  std::vector<DeviceShard> shards;
  std::vector<ShardPointers> pointers;
  for (int r = 0; r < n; ++r) {
    shards.push_back(upload_shard(p, r, ring.device(), q, k, v));
    pointers.push_back(shards.back().pointers());
  }
  ring.forward_all(pointers, nullptr);
  ring.synchronize();
  GpuRingResult result;
  if (dout) {
    std::vector<BackwardShardPointers> backward;
    for (int r = 0; r < n; ++r) {
      upload_backward(p, r, *dout, shards[r]);
      backward.push_back(shards[r].backward_pointers());
    }
    ring.backward_all(backward, nullptr);
    ring.synchronize();
    std::vector<std::vector<float>> dq(n), dk(n), dv(n);
    for (int r = 0; r < n; ++r) download_grads(p, shards[r], dq[r], dk[r], dv[r]);
    result.dq = gather_shards(dq, p.batch, p.q_heads, p.seq_len, p.head_dim, p.scheme, n, p.documents);
    result.dk = gather_shards(dk, p.batch, p.kv_heads, p.seq_len, p.head_dim, p.scheme, n, p.documents);
    result.dv = gather_shards(dv, p.batch, p.kv_heads, p.seq_len, p.head_dim, p.scheme, n, p.documents);
    result.backward_step_kernels = ring.backward_step_kernels();
    result.backward_kernel_uri = result.backward_step_kernels.front().kernel_uri;
  }
  std::vector<std::vector<float>> outs(n), lses(n);
  for (int r = 0; r < n; ++r) download_outputs(p, shards[r], outs[r], lses[r]);
  result.out = gather_shards(outs, p.batch, p.q_heads, p.seq_len, p.head_dim, p.scheme, n, p.documents);
  result.lse = gather_shards(lses, p.batch, p.q_heads, p.seq_len, 1, p.scheme, n, p.documents);
  result.step_kernels = ring.step_kernels();
  result.kernel_uri = ring.kernel_uri();
  return result;
}

void run_gpu_ring_nccl_rank(const Problem& p, void* comm, const std::vector<float>& q,
                            const std::vector<float>& k, const std::vector<float>& v,
                            const RingOptions& options, std::vector<float>& out,
                            std::vector<float>& lse, const std::vector<float>* dout, RankGrads* grads) {
  RingAttention ring = RingAttention::nccl(p, comm, options);
  DeviceShard shard = upload_shard(p, ring.rank(), ring.device(), q, k, v);
  const ShardPointers s = shard.pointers();
  ring.forward(s.q, s.k, s.v, s.out, s.lse, nullptr);
  ring.synchronize();
  download_outputs(p, shard, out, lse);
  if (!dout || !grads) return;
  upload_backward(p, ring.rank(), *dout, shard);
  const BackwardShardPointers b = shard.backward_pointers();
  ring.backward(b.q, b.k, b.v, b.out, b.lse, b.dout, b.dq, b.dk, b.dv, nullptr);
  ring.synchronize();
  download_grads(p, shard, grads->dq, grads->dk, grads->dv);
}

}  // namespace cpgen::gpu
