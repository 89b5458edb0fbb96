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
  DeviceBuffer dout, dq, dk, dv;  // backward runs only (upload_backward)
  ShardPointers pointers() const;
  BackwardShardPointers backward_pointers() const;
};

// Shards rank `rank` of full [batch, heads, seq, head_dim] float tensors (global order) onto the
// device in the problem's dtype, with out and lse poisoned to NaN.
DeviceShard upload_shard(const Problem& problem, int rank, int device, const std::vector<float>& q,
                         const std::vector<float>& k, const std::vector<float>& v);
// Adds the backward's tensors to a shard: rank `rank`'s part of the full output gradient dout
// (q's layout) uploaded, dq/dk/dv allocated and poisoned to NaN.
void upload_backward(const Problem& problem, int rank, const std::vector<float>& dout, DeviceShard& shard);
// dq [batch, q_heads, local, head_dim], dk and dv [batch, kv_heads, local, head_dim] as float.
void download_grads(const Problem& problem, const DeviceShard& shard, std::vector<float>& dq,
                    std::vector<float>& dk, std::vector<float>& dv);
// Refills out and lse of a shard with NaN (before every checked run).
void poison_outputs(const Problem& problem, DeviceShard& shard);
// out as float [batch, q_heads, local, head_dim] and lse [batch, q_heads, local].
void download_outputs(const Problem& problem, const DeviceShard& shard, std::vector<float>& out,
                      std::vector<float>& lse);

struct GpuRingResult {
  std::vector<float> out, lse;  // gathered over ranks, global position order
  std::vector<float> dq, dk, dv;  // likewise, when a backward ran
  std::string kernel_uri;            // ring step 0's forward kernel
  std::string backward_kernel_uri;   // ring step 0's backward kernel, when a backward ran
  std::vector<StepKernelChoice> step_kernels;           // what each forward step type ran
  std::vector<StepKernelChoice> backward_step_kernels;  // likewise, when a backward ran
};

// Loopback ring on device options.device over all cp_size virtual ranks; waits for the result.
// With dout (full [batch, q_heads, seq, head_dim]) the backward runs after the forward, on the
// forward's out and lse as they are on the device, and the gradients come back too.
GpuRingResult run_gpu_ring_loopback(const Problem& problem, const std::vector<float>& q,
                                    const std::vector<float>& k, const std::vector<float>& v,
                                    const RingOptions& options = {},
                                    const std::vector<float>* dout = nullptr);

// One rank's gradients (local order).
struct RankGrads {
  std::vector<float> dq, dk, dv;
};

// One rank of an NCCL ring (comm: ncclComm_t): its shard of the full inputs in, its shard of out
// and lse back (local order). Waits for the result; a stalled peer throws the watchdog's error.
// With dout and grads, the backward runs after the forward and its gradients come back.
void run_gpu_ring_nccl_rank(const Problem& problem, void* comm, const std::vector<float>& q,
                            const std::vector<float>& k, const std::vector<float>& v,
                            const RingOptions& options, std::vector<float>& out,
                            std::vector<float>& lse, const std::vector<float>* dout = nullptr,
                            RankGrads* grads = nullptr);

}  // namespace cpgen::gpu
