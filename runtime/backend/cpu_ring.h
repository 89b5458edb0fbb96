// Whole-problem entry point of the CPU ring: split full tensors over N virtual ranks (threads),
// run the ring forward and backward through the real driver and CPU transport, and gather.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "runtime/backend/cpu_backend.h"

namespace cpgen {

struct CpuRingResult {
  std::vector<RankTensors> ranks;  // per rank: its shards of the inputs and of every result
  // Gathered over ranks, in global position order: out [batch, q_heads, seq, head_dim],
  // lse [batch, q_heads, seq], dq like out, dk and dv [batch, kv_heads, seq, head_dim].
  std::vector<float> out, lse, dq, dk, dv;
};

// q and dout: [batch, q_heads, seq_len, head_dim]; k, v: [batch, kv_heads, seq_len, head_dim].
// With backward = false, dout may be empty and dq/dk/dv stay empty. Throws Error(kBadInput) for
// a layout the scheme cannot split or tensors of the wrong size, and the first rank's failure
// otherwise (the other ranks are stopped, never left waiting).
CpuRingResult run_cpu_ring(const RingLayout& layout, const std::vector<float>& q,
                           const std::vector<float>& k, const std::vector<float>& v,
                           const std::vector<float>& dout, bool backward = true,
                           std::chrono::milliseconds watchdog = std::chrono::seconds(120));

}  // namespace cpgen
