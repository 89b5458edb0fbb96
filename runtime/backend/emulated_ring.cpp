#include "runtime/backend/emulated_ring.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "cpgen/error.h"
#include "runtime/backend/emulated_device.h"
#include "runtime/backend/kernel_ring_backend.h"
#include "runtime/core/half_convert.h"
#include "runtime/core/layout_strides.h"
#include "runtime/ring/partition.h"
#include "runtime/transport/cpu_transport.h"

namespace cpgen {
namespace {

struct HostShard {
  DeviceAllocation q, k, v, out, lse;
  DeviceAllocation dout, dq, dk, dv;  // backward only
};

// All-ones bytes are NaN in bf16, fp16 and fp32: an element the kernels never write shows.
DeviceAllocation poisoned(KernelDevice& device, size_t bytes) {
  DeviceAllocation a = device.allocate(bytes);
  std::memset(a.data(), 0xff, a.bytes());
  return a;
}

std::vector<float> download_half(const DeviceAllocation& a, Dtype dtype) {
  const auto* bits = a.as<const uint16_t>();
  return from_half(std::vector<uint16_t>(bits, bits + a.bytes() / sizeof(uint16_t)), dtype);
}

std::unique_ptr<EmulatedDevice> make_device(const std::vector<std::pair<StepType, KernelSpec>>& per_step,
                                            const std::string& arch, KernelStore* store,
                                            const EmulatedBackward* backward) {
  if (!backward) return std::make_unique<EmulatedDevice>(per_step, arch, store);
  std::vector<std::pair<StepType, KernelSpec>> all = per_step;
  all.insert(all.end(), backward->steps.begin(), backward->steps.end());
  return std::make_unique<EmulatedDevice>(all, backward->pre, backward->convert, arch, store);
}

DeviceAllocation upload_half(KernelDevice& device, const std::vector<float>& values, Dtype dtype) {
  const std::vector<uint16_t> half = to_half(values, dtype);
  DeviceAllocation a = device.allocate(half.size() * sizeof(uint16_t));
  device.upload(a.data(), half.data(), half.size() * sizeof(uint16_t));
  return a;
}

// A rank's [batch, heads, rows, head_dim] shard (row-major) to the element order the strides
// describe and back: the caller's framework hands the ring tensors in its layout (the presets
// are dense, so the shard keeps its element count).
struct ShardShape {
  int64_t batch, heads, rows, head_dim;
  TensorStrides strides;
};

std::vector<float> to_layout(const std::vector<float>& bhsd, const ShardShape& s) {
  std::vector<float> out(bhsd.size());
  size_t i = 0;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t r = 0; r < s.rows; ++r, i += static_cast<size_t>(s.head_dim))
        std::copy_n(bhsd.begin() + static_cast<std::ptrdiff_t>(i), s.head_dim,
                    out.begin() + b * s.strides.batch + h * s.strides.head + r * s.strides.row);
  return out;
}

std::vector<float> from_layout(const std::vector<float>& laid, const ShardShape& s) {
  std::vector<float> out(laid.size());
  size_t i = 0;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t r = 0; r < s.rows; ++r, i += static_cast<size_t>(s.head_dim))
        std::copy_n(laid.begin() + b * s.strides.batch + h * s.strides.head + r * s.strides.row, s.head_dim,
                    out.begin() + static_cast<std::ptrdiff_t>(i));
  return out;
}

}  // namespace

EmulatedRingResult run_emulated_ring(const Problem& p, const std::vector<std::pair<StepType, KernelSpec>>& per_step,
                                     const std::string& arch, const std::vector<float>& q,
                                     const std::vector<float>& k, const std::vector<float>& v,
                                     KernelStore* store, const EmulatedBackward* backward) {
  const std::unique_ptr<EmulatedDevice> owned_device = make_device(per_step, arch, store, backward);
  EmulatedDevice& device = *owned_device;
  const int n = static_cast<int>(p.cp_size);
  const RingPositions positions(p, device);
  std::vector<HostShard> shards(static_cast<size_t>(n));
  std::vector<std::unique_ptr<KernelRingBackend>> backends;
  // Per rank: its row count and the shapes of its q-like and k-like tensors in the problem's layout.
  std::vector<ShardShape> q_shape, kv_shape;
  for (int r = 0; r < n; ++r) {
    const int64_t len = positions.rank_len(r);
    q_shape.push_back({p.batch, p.q_heads, len, p.head_dim, layout_strides(p.layout, p.batch, p.q_heads, len, p.head_dim)});
    kv_shape.push_back({p.batch, p.kv_heads, len, p.head_dim, layout_strides(p.layout, p.batch, p.kv_heads, len, p.head_dim)});
  }
  const auto shard_of = [&](const std::vector<float>& full, const ShardShape& shape, int r) {
    return to_layout(scatter_shard(full, p.batch, shape.heads, p.seq_len, p.head_dim, p.scheme, n, r, p.documents), shape);
  };
  const auto gather = [&](const std::vector<std::vector<float>>& laid, const std::vector<ShardShape>& shapes,
                          int64_t dim) {
    std::vector<std::vector<float>> shards;
    for (int r = 0; r < n; ++r) shards.push_back(dim == 1 ? laid[r] : from_layout(laid[r], shapes[r]));
    return gather_shards(shards, p.batch, shapes[0].heads, p.seq_len, dim, p.scheme, n, p.documents);
  };
  for (int r = 0; r < n; ++r) {
    const size_t rows = static_cast<size_t>(p.batch * p.q_heads * positions.rank_len(r));
    HostShard& s = shards[static_cast<size_t>(r)];
    s.q = upload_half(device, shard_of(q, q_shape[r], r), p.dtype);
    s.k = upload_half(device, shard_of(k, kv_shape[r], r), p.dtype);
    s.v = upload_half(device, shard_of(v, kv_shape[r], r), p.dtype);
    s.out = poisoned(device, rows * static_cast<size_t>(p.head_dim) * sizeof(uint16_t));
    s.lse = poisoned(device, rows * sizeof(float));
    backends.push_back(std::make_unique<KernelRingBackend>(p, r, device, positions));
    backends.back()->bind({s.q.data(), s.k.data(), s.v.data(), s.out.data(), s.lse.as<float>()});
  }
  run_ring_threads(n, [&](int rank, Transport& transport) { ring_forward(*backends[rank], transport); });

  EmulatedRingResult result;
  std::vector<std::vector<float>> outs(static_cast<size_t>(n)), lses(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const HostShard& s = shards[static_cast<size_t>(r)];
    outs[r] = download_half(s.out, p.dtype);
    lses[r].assign(s.lse.as<const float>(), s.lse.as<const float>() + s.lse.bytes() / sizeof(float));
  }
  result.out = gather(outs, q_shape, p.head_dim);
  result.lse = gather(lses, q_shape, 1);

  if (backward) {
    // The backward reads the forward's out (in the input dtype) and lse as the kernels wrote them.
    for (int r = 0; r < n; ++r) {
      HostShard& s = shards[static_cast<size_t>(r)];
      s.dout = upload_half(device, shard_of(backward->dout, q_shape[r], r), p.dtype);
      s.dq = poisoned(device, s.q.bytes());
      s.dk = poisoned(device, s.k.bytes());
      s.dv = poisoned(device, s.v.bytes());
      backends[r]->bind_backward({s.q.data(), s.k.data(), s.v.data(), s.out.data(), s.lse.as<float>(),
                                  s.dout.data(), s.dq.data(), s.dk.data(), s.dv.data()});
    }
    run_ring_threads(n, [&](int rank, Transport& transport) { ring_backward(*backends[rank], transport); });
    std::vector<std::vector<float>> dqs(static_cast<size_t>(n)), dks(static_cast<size_t>(n)), dvs(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      const HostShard& s = shards[static_cast<size_t>(r)];
      dqs[r] = download_half(s.dq, p.dtype);
      dks[r] = download_half(s.dk, p.dtype);
      dvs[r] = download_half(s.dv, p.dtype);
    }
    result.dq = gather(dqs, q_shape, p.head_dim);
    result.dk = gather(dks, kv_shape, p.head_dim);
    result.dv = gather(dvs, kv_shape, p.head_dim);
  }
  result.launches = device.launches();
  result.launch_ms = device.launch_ms();
  return result;
}

}  // namespace cpgen
