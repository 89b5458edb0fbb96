#include "runtime/backend/emulated_ring.h"

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
  // Shards in the problem's layout, as a framework in that layout hands them over.
  const auto shard_of = [&](const std::vector<float>& full, int64_t heads, int r) {
    return shard_to_layout(scatter_shard(full, p.batch, heads, p.seq_len, p.head_dim, p.scheme, n, r, p.documents),
                           p.layout, p.batch, heads, p.head_dim);
  };
  const auto gather = [&](const std::vector<std::vector<float>>& laid, int64_t heads, int64_t dim) {
    std::vector<std::vector<float>> shards;
    for (int r = 0; r < n; ++r)
      shards.push_back(dim == 1 ? laid[r] : shard_from_layout(laid[r], p.layout, p.batch, heads, p.head_dim));
    return gather_shards(shards, p.batch, heads, p.seq_len, dim, p.scheme, n, p.documents);
  };
  const bool given_forward = backward && !backward->out.empty();
  for (int r = 0; r < n; ++r) {
    const size_t rows = static_cast<size_t>(p.batch * p.q_heads * positions.rank_len(r));
    HostShard& s = shards[static_cast<size_t>(r)];
    s.q = upload_half(device, shard_of(q, p.q_heads, r), p.dtype);
    s.k = upload_half(device, shard_of(k, p.kv_heads, r), p.dtype);
    s.v = upload_half(device, shard_of(v, p.kv_heads, r), p.dtype);
    if (given_forward) {
      s.out = upload_half(device, shard_of(backward->out, p.q_heads, r), p.dtype);
      const std::vector<float> lse =
          scatter_shard(backward->lse, p.batch, p.q_heads, p.seq_len, 1, p.scheme, n, r, p.documents);
      s.lse = device.allocate(lse.size() * sizeof(float));
      device.upload(s.lse.data(), lse.data(), lse.size() * sizeof(float));
    } else {
      s.out = poisoned(device, rows * static_cast<size_t>(p.head_dim) * sizeof(uint16_t));
      s.lse = poisoned(device, rows * sizeof(float));
    }
    backends.push_back(std::make_unique<KernelRingBackend>(p, r, device, positions));
    backends.back()->bind({s.q.data(), s.k.data(), s.v.data(), s.out.data(), s.lse.as<float>()});
  }
  if (!given_forward)
    run_ring_threads(n, [&](int rank, Transport& transport) { ring_forward(*backends[rank], transport); });

  EmulatedRingResult result;
  std::vector<std::vector<float>> outs(static_cast<size_t>(n)), lses(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const HostShard& s = shards[static_cast<size_t>(r)];
    outs[r] = download_half(s.out, p.dtype);
    lses[r].assign(s.lse.as<const float>(), s.lse.as<const float>() + s.lse.bytes() / sizeof(float));
  }
  result.out = gather(outs, p.q_heads, p.head_dim);
  result.lse = gather(lses, p.q_heads, 1);

  if (backward) {
    // The backward reads the forward's out (in the input dtype) and lse as the kernels wrote them.
    for (int r = 0; r < n; ++r) {
      HostShard& s = shards[static_cast<size_t>(r)];
      s.dout = upload_half(device, shard_of(backward->dout, p.q_heads, r), p.dtype);
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
    result.dq = gather(dqs, p.q_heads, p.head_dim);
    result.dk = gather(dks, p.kv_heads, p.head_dim);
    result.dv = gather(dvs, p.kv_heads, p.head_dim);
  }
  result.launches = device.launches();
  result.launch_ms = device.launch_ms();
  return result;
}

}  // namespace cpgen
