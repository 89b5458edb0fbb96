// The CPU ring backend: one rank's memory and per-step math in float32, with the GPU step
// kernel's semantics (runtime/ring/cpu_softmax_state.h), driven by runtime/ring/ring_driver.h. It is the
// executable specification the GPU backend is tested against, and what CI runs the ring on.
#pragma once

#include <cstdint>
#include <vector>

#include "cpgen/types.h"
#include "runtime/core/attention_shape.h"
#include "runtime/ring/ring_driver.h"

namespace cpgen {

// How the problem is split: the same on every rank. The documents of the partition are those of
// shape.cu_seqlens, so the mask and the split always agree.
struct RingLayout {
  AttentionShape shape;
  int64_t seq_len = 0;
  Scheme scheme = Scheme::kZigzag;
  int cp_size = 1;

  // Document lengths from shape.cu_seqlens (empty: one document).
  std::vector<int64_t> documents() const;
  // Every rank's global positions (runtime/ring/partition.h): rank r holds positions(r).size()
  // tokens, which differ between ranks when lengths do not divide.
  std::vector<std::vector<int64_t>> rank_positions() const;
};

// One rank's tensors, [batch, heads, local_len, head_dim] (lse: [batch, q_heads, local_len]),
// local_len being the count of the rank's own positions.
struct RankTensors {
  std::vector<float> q, k, v, dout;  // inputs
  std::vector<float> out, lse;       // forward results; inputs of the backward
  std::vector<float> dq, dk, dv;     // backward results
};

// Ranks may hold different token counts. Each K/V (and dK/dV) slot is sized for the longest
// chunk of any rank, [batch, kv_heads, max_len, head_dim], so every rank's exchanges have the
// same byte counts (the transport contract); the true length of the held chunk is that of
// step.kv_rank's positions, which every rank knows from the partition, so no length travels.
class CpuBackend final : public RingBackend {
 public:
  // Reads tensors.q/k/v (and dout, out, lse in the backward); writes out/lse (forward) and
  // dq/dk/dv (backward). `tensors` must outlive the backend.
  CpuBackend(const RingLayout& layout, int rank, RankTensors& tensors);

  std::vector<BufferView> kv_buffers(int slot) override;
  std::vector<BufferView> dkv_buffers(int slot) override;
  void forward_begin() override;
  void forward_step(const RingStep& step) override;
  void backward_begin() override;
  void backward_step(const RingStep& step) override;
  void accumulate_dkv(int slot, bool is_first) override;
  void backward_end(int slot) override;

 private:
  struct KvChunk {
    std::vector<float> k, v;
  };

  RingLayout layout_;
  int rank_;
  RankTensors& tensors_;
  std::vector<std::vector<int64_t>> positions_;  // per rank, from the partition scheme
  int64_t local_len_, max_len_;  // this rank's token count; the longest of any rank (slot rows)
  int64_t q_size_, kv_size_, rows_;  // elements of q and of own k, and query rows
  int64_t slot_size_;                // elements of one K (or V) slot: max_len rows per head

  KvChunk kv_[2];             // double-buffered K/V: one computed on, one being received
  KvChunk dkv_[2];            // double-buffered fp32 dK/dV accumulators travelling the ring
  KvChunk dkv_partial_;       // this step's contribution of the local queries
  std::vector<float> o_state_, m_state_, l_state_;  // forward running state
  std::vector<float> dq_, delta_;                   // backward: dQ and D = rowsum(dO * O)
};

}  // namespace cpgen
