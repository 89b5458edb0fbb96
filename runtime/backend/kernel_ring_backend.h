// The ring backend of one rank that runs generated kernels on a KernelDevice
// (runtime/backend/kernel_device.h): owns the two K/V slots that travel around the ring and the
// fp32 running state on the device, fills the kernel params of each step and launches them. The
// same code drives a GPU (GpuDevice) and the CPU emulator, so what the emulator checks is what the
// GPU runs.
//
// Layouts and lengths. The caller's tensors are read and written in place through strides (no
// copy or transpose); ranks may hold different row counts (packed documents, lengths that do not
// divide). A K/V slot holds any rank's chunk as its sender laid it out, sized for the largest
// chunk; a step reads the held chunk with the strides and length of the rank it came from (the
// problem's layout at that rank's row count). The transport contract (runtime/ring/transport.h)
// gives an exchange one byte count for what a rank sends and what it receives, while a rank sends
// one chunk and receives another of a different length: so every exchange moves a whole slot,
// the largest chunk's bytes, of which a receiver reads only the true rows.
//
// Step 0 computes on the caller's own K/V. The first exchange sends them straight from the
// caller's tensors when they fill a slot (this rank holds the largest chunk, always so when the
// shards are equal): no copy at all. A rank with fewer rows copies its K/V into slot 0 first,
// because the exchange reads a whole slot, more than its tensors hold, and zeroes the slot's
// remaining rows: no exchange moves memory nothing wrote (nor do the dK/dV parts, zeroed once).
//
// Half-size steps (causal zigzag without documents). A key-half step launches over the sender's
// first chunk of keys only, a query-half step over this rank's second chunk of queries only (a
// view: q, out, positions, lse and state pointers moved by the first chunk's rows, state_len
// the row pitch), except on the last forward step, which writes out and lse of every row, and
// except with a kernel that cannot launch over a view (KernelDevice::forward_takes_query_view:
// the wgmma family), which runs the step over every row.
//
// Backward (params_bwd.cuh). backward_begin stages the own K/V as the forward does and launches
// the preprocessing kernel (delta, dQ accumulator cleared). The step kernel of a ring step runs in
// accumulate_dkv_part, not in backward_step: it adds the local queries' dK/dV straight into the
// held chunk's fp32 accumulator (write mode on the chunk's first step, add mode after), so it must
// wait until that accumulator has arrived from the previous rank, which the driver guarantees by
// then. backward_step only records the step. A step whose chunk no local query sees
// (RingPositions::chunk_visible: documents, windows, causal) launches nothing in add mode; as the
// chunk's first step it still launches, and the kernel writes zeros. backward_end converts dQ and
// the own chunk's dK/dV into the caller's tensors in the input dtype.
//
// Overlap. Each chunk's keys are cut in two parts (the first max_rank_len / 2 keys and the rest,
// each cut at the chunk's length),
// each with its own accumulator that travels as its own exchange (dkv_parts() == 2), and a step
// launches the step kernel once per part, on that part's keys. So the transfer of part 0 of step
// s-1 runs while part 1 of step s-1 computes, and the transfer of part 1 while part 0 of step s
// computes: the accumulator's transfer overlaps compute without a partial buffer. dQ gets both
// parts' atomic adds. (The cost: twice the launches, each on half the key blocks.)
//
// Memory. The fp32 dQ accumulator and delta reuse the forward's running state (o_state is
// Q-sized fp32, m_state one float per row), so the backward adds only the dK/dV accumulators: two
// slots of fp32 dK + dV (each slot split in the two parts), i.e. 2 x (2 x K elements x 4 bytes) =
// 4x the bytes of the input-dtype K/V chunk that one forward slot holds. One slot is the
// accumulator the rank works on, the other the one in flight from the previous rank: one extra
// fp32 K/V-sized accumulator in flight, as the memory rule allows. There is no separate
// partial buffer and no fp32 add kernel.
#pragma once

#include <algorithm>
#include <optional>
#include <vector>

#include "cpgen/problem.h"
#include "runtime/backend/kernel_device.h"
#include "runtime/ring/ring_driver.h"

namespace cpgen {

// Global positions of every rank's local rows as int32 in device memory, rank after rank: a step
// reads its query positions from its own rank's rows and its key positions from the rows of the
// rank the chunk started on, so positions never travel. Alongside, each local query's visible key
// interval [key_first, key_last] under the problem's mask (runtime/core/attention_shape.h), which
// kernels specialized on key intervals read (templates/params.cuh). Ranks may hold different
// numbers of rows (packed documents that do not divide). One table serves every rank of a device.
class RingPositions {
 public:
  RingPositions(const Problem& problem, KernelDevice& device);
  const int* rank_positions(int rank) const;
  const int* rank_key_first(int rank) const;
  const int* rank_key_last(int rank) const;
  int64_t rank_len(int rank) const { return lengths_[static_cast<size_t>(rank)]; }
  int64_t max_rank_len() const { return max_len_; }
  // Whether every rank holds max_rank_len() rows.
  bool equal_shards() const {
    return std::all_of(lengths_.begin(), lengths_.end(), [&](int64_t len) { return len == max_len_; });
  }
  // Whether some local query of q_rank sees some key of the chunk kv_rank holds (host side): a
  // step whose chunk no local query sees needs no compute.
  bool chunk_visible(int q_rank, int kv_rank) const {
    return visible_[static_cast<size_t>(q_rank) * lengths_.size() + static_cast<size_t>(kv_rank)];
  }

 private:
  std::vector<char> visible_;  // [q_rank][kv_rank]
  std::vector<int64_t> lengths_, offsets_;  // per rank: rows, first row in each table
  int64_t max_len_ = 0;
  DeviceAllocation table_;  // positions, then key_first, then key_last, each offsets_.back() rows
  int64_t total_ = 0;
};

// The caller's tensors for one ring call, as device pointers of the KernelDevice. The forward
// reads q, k, v and writes out and lse; the backward reads q, k, v, out, lse (the forward's
// results) and dout and writes dq, dk, dv. Each tensor is [batch, heads, rows, head_dim] of the
// rank's own rows (RingPositions::rank_len) with the element strides in `strides`, or, when it
// is null, those of the problem's layout (layout_shard_strides in cpgen/problem.h); lse is
// contiguous [batch, q_heads, rows] fp32. K and V must be in the problem's layout (they travel
// the ring as they are); the others may have any strides whose rows do not overlap.
struct ShardTensors {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  const ShardStrides* strides = nullptr;  // read by bind; need not outlive it
};

class KernelRingBackend final : public RingBackend {
 public:
  // `device` and `positions` must outlive the backend.
  KernelRingBackend(const Problem& problem, int rank, KernelDevice& device, const RingPositions& positions);
  // Before each forward run: the tensors (checked: q, k, v, out, lse non-null, aligned as the
  // kernels load them; strides as ShardTensors says, each failure one line naming the tensor).
  // A rank that holds no rows may pass null pointers and any strides: its tensors are empty.
  void bind(const ShardTensors& tensors);
  // Before each backward run: the same checks on every field of `tensors`.
  void bind_backward(const ShardTensors& tensors);

  std::vector<BufferView> kv_buffers(int slot) override;
  std::vector<BufferView> first_kv_send_buffers() override;
  std::vector<BufferView> dkv_buffers(int slot) override;
  void forward_begin() override;
  void forward_step(const RingStep& step) override;
  void backward_begin() override;
  void backward_step(const RingStep& step) override;
  void accumulate_dkv(int slot, bool is_first) override;
  int dkv_parts() const override { return parts_; }
  std::vector<BufferView> dkv_part_buffers(int slot, int part) override;
  void accumulate_dkv_part(int slot, bool is_first, int part) override;
  void backward_end(int slot) override;

  // The params of one forward step (exposed for tests of the strides and pointers).
  RingFwdParams step_params(const RingStep& step) const;
  // Whether forward_step(step) launches a kernel (see there for the steps that launch nothing).
  bool launches_forward(const RingStep& step) const { return forward_launch(step).has_value(); }
  // The params of the backward kernels: the preprocessing; the step kernel of `step` on the keys
  // of part `part`, writing (accumulate false) or adding into that part of dkv slot `dkv_slot`;
  // and the conversion of an fp32 accumulator `acc` of `heads` heads and `len` rows into `grad`
  // (with strides `grad_strides`). Exposed for tests.
  RingBwdPreParams backward_pre_params() const;
  RingBwdParams backward_step_params(const RingStep& step, int dkv_slot, bool accumulate, int part) const;
  RingBwdConvertParams convert_params(const float* acc, void* grad, const TensorStrides& grad_strides, int64_t heads,
                                      int64_t len) const;
  // The key rows of part `part` of a slot: [part_first_key(part), part_first_key(part + 1)) of
  // the largest chunk; a shorter chunk's part is that range cut at its length.
  int64_t part_first_key(int part) const;

 private:
  // `given` with placeholders for a rank that holds no rows (bind).
  ShardTensors empty_rank_tensors(const ShardTensors& given) const;
  Problem problem_;
  int rank_;
  KernelDevice& device_;
  const RingPositions& positions_;
  int64_t len_ = 0, max_len_ = 0;  // this rank's rows; the largest rank's
  bool halves_ = false;            // causal zigzag without documents: half-size steps apply
  size_t slot_bytes_ = 0;          // one of K or V of the largest chunk: what every exchange moves
  size_t own_kv_bytes_ = 0;        // one of this rank's K or V
  DeviceAllocation k_slots_[2], v_slots_[2];
  DeviceAllocation o_state_, m_state_, l_state_;  // backward: o_state is dQ, m_state delta
  int parts_;                                   // 2, or 1 when no chunk has two rows
  DeviceAllocation dk_slots_[2][2], dv_slots_[2][2];  // [slot][part], allocated by the first backward
  ShardTensors tensors_;
  ShardStrides strides_;       // of tensors_, resolved by bind
  RingStep pending_step_;      // recorded by backward_step, launched by accumulate_dkv_part
  bool has_pending_step_ = false;
  int next_part_ = 0;          // the part accumulate_dkv_part launches next

  size_t part_bytes(int part) const;  // one fp32 dK (or dV) accumulator part
  int64_t first_chunk_len(int rank) const;          // zigzag: rows of the rank's first chunk
  TensorStrides chunk_strides(int origin) const;    // K/V strides of the chunk of rank `origin`
  int64_t query_first(const RingStep& step, bool backward) const;
  // The params forward_step launches `step` with, or nothing when it launches no kernel.
  std::optional<RingFwdParams> forward_launch(const RingStep& step) const;
  bool own_kv_in_place() const;
  void stage_own_kv();
  void check_strides(const char* name, const TensorStrides& s, int64_t heads) const;
  void allocate_dkv();
};

}  // namespace cpgen
