// Whole-problem runs of the GPU ring from host tensors: shard the inputs by the partition scheme,
// upload them in the problem's dtype, poison the outputs (NaN), run RingAttention, read back and
// gather. Used by `cpgen verify --backend gpu`, `cpgen bench` and the GPU tests.
#pragma once

#include <cuda.h>

#include <vector>

#include "cpgen/problem.h"
#include "cpgen/ring_attention.h"
#include "runtime/cuda/device_buffer.h"

namespace cpgen::gpu {

// One rank's tensors on the device (contiguous, cpgen/ring_attention.h layout).
struct DeviceShard {
  DeviceBuffer q, k, v, out, lse;
  ShardPointers pointers() const;
};

// Shards rank `rank` of full [batch, heads, seq, head_dim] float tensors (global order) onto the
// device in the problem's dtype, with out and lse poisoned to NaN.
DeviceShard upload_shard(const Problem& problem, int rank, int device, const std::vector<float>& q,
                         const std::vector<float>& k, const std::vector<float>& v);
// Refills out and lse of a shard with NaN (before every checked run).
void poison_outputs(const Problem& problem, DeviceShard& shard);
// out as float [batch, q_heads, local, head_dim] and lse [batch, q_heads, local].
void download_outputs(const Problem& problem, const DeviceShard& shard, std::vector<float>& out,
                      std::vector<float>& lse);

struct GpuRingResult {
  std::vector<float> out, lse;  // gathered over ranks, global position order
  std::string kernel_uri;
};

// Loopback ring on device options.device over all cp_size virtual ranks; waits for the result.
GpuRingResult run_gpu_ring_loopback(const Problem& problem, const std::vector<float>& q,
                                    const std::vector<float>& k, const std::vector<float>& v,
                                    const RingOptions& options = {});

// One rank of an NCCL ring (comm: ncclComm_t): its shard of the full inputs in, its shard of out
// and lse back (local order). Waits for the result; a stalled peer throws the watchdog's error.
void run_gpu_ring_nccl_rank(const Problem& problem, void* comm, const std::vector<float>& q,
                            const std::vector<float>& k, const std::vector<float>& v,
                            const RingOptions& options, std::vector<float>& out,
                            std::vector<float>& lse);

}  // namespace cpgen::gpu
