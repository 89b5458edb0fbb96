#include "runtime/backend/kernel_ring_backend.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "cpgen/error.h"
#include "runtime/core/attention_shape.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/ring/partition.h"

namespace cpgen {

namespace {

// What this backend cannot run: a layout other than contiguous bhsd, or shards of different
// lengths (documents that do not divide included). Masks are not refused here: the key intervals
// and the softcap reach every launch, and which kernels read them is the selection's business
// (check_kernel_ring_problem, kernel_needs_key_intervals).
void check_backend_problem(const Problem& p, const std::vector<int64_t>& rank_lengths, int first_rank = 0) {
  const std::string where = p.name.empty() ? std::string("problem") : "problem '" + p.name + "'";
  if (!p.layout.empty() && p.layout != "bhsd")
    throw_bad_input(where + ": layout " + p.layout + " is not supported by the ring kernels yet (bhsd is)");
  check_partitionable(p.scheme, p.seq_len, static_cast<int>(p.cp_size));
  for (size_t r = 0; r < rank_lengths.size(); ++r)
    if (rank_lengths[r] != p.local_seq_len())
      throw_bad_input(where + ": rank " + std::to_string(first_rank + static_cast<int>(r)) + " holds " +
                      std::to_string(rank_lengths[r]) + " positions, not seq_len / cp_size = " +
                      std::to_string(p.local_seq_len()) +
                      "; the ring kernels need every document length divisible by the scheme's chunk count");
}

}  // namespace

RingPositions::RingPositions(const Problem& problem, KernelDevice& device) {
  const int n = static_cast<int>(problem.cp_size);
  const AttentionShape shape = attention_shape_of(problem);
  std::vector<std::vector<int64_t>> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.push_back(partition_positions(problem.scheme, problem.seq_len, n, r, problem.documents));
    offsets_.push_back(total_);
    lengths_.push_back(static_cast<int64_t>(ranks.back().size()));
    total_ += lengths_.back();
    max_len_ = std::max(max_len_, lengths_.back());
  }
  check_backend_problem(problem, lengths_);
  // Interval ends are clamped to int32; an unbounded side becomes INT32_MAX / 0, which no position
  // (validated below 2^31) passes.
  std::vector<int> host(static_cast<size_t>(3 * total_));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < ranks[r].size(); ++i) {
      const size_t row = static_cast<size_t>(offsets_[r]) + i;
      const KeyInterval keys = visible_keys(shape, ranks[r][i]);
      host[row] = static_cast<int>(ranks[r][i]);
      host[static_cast<size_t>(total_) + row] = static_cast<int>(std::max<int64_t>(keys.first, 0));
      host[static_cast<size_t>(2 * total_) + row] =
          static_cast<int>(std::min<int64_t>(keys.last, std::numeric_limits<int32_t>::max()));
    }
  // Chunk visibility by a two-pointer sweep: the interval ends are non-decreasing along the
  // queries, so the first key at or after a query's interval start only moves forward.
  visible_.assign(static_cast<size_t>(n) * n, 0);
  for (int q = 0; q < n; ++q)
    for (int k = 0; k < n; ++k) {
      const std::vector<int64_t>& keys = ranks[k];
      size_t key = 0;
      for (size_t i = 0; i < ranks[q].size() && !visible_[q * n + k]; ++i) {
        const size_t row = static_cast<size_t>(offsets_[q]) + i;
        while (key < keys.size() && keys[key] < host[static_cast<size_t>(total_) + row]) ++key;
        if (key < keys.size() && keys[key] <= host[static_cast<size_t>(2 * total_) + row]) visible_[q * n + k] = 1;
      }
    }
  table_ = device.allocate(std::max<size_t>(host.size(), 1) * sizeof(int));
  if (!host.empty()) device.upload(table_.data(), host.data(), host.size() * sizeof(int));
}

const int* RingPositions::rank_positions(int rank) const { return table_.as<const int>() + offsets_[rank]; }
const int* RingPositions::rank_key_first(int rank) const {
  return table_.as<const int>() + total_ + offsets_[rank];
}
const int* RingPositions::rank_key_last(int rank) const {
  return table_.as<const int>() + 2 * total_ + offsets_[rank];
}

KernelRingBackend::KernelRingBackend(const Problem& problem, int rank, KernelDevice& device,
                                     const RingPositions& positions)
    : problem_(problem), rank_(rank), device_(device), positions_(positions) {
  check_backend_problem(problem, {positions.rank_len(rank)}, rank);
  const size_t local = static_cast<size_t>(problem.local_seq_len());
  const size_t b = static_cast<size_t>(problem.batch), hd = static_cast<size_t>(problem.head_dim);
  const size_t qh = static_cast<size_t>(problem.q_heads), kvh = static_cast<size_t>(problem.kv_heads);
  kv_bytes_ = b * kvh * local * hd * dtype_bytes(problem.dtype);
  parts_ = local >= 2 ? 2 : 1;
  for (int s = 0; s < 2; ++s) {
    k_slots_[s] = device.allocate(kv_bytes_);
    v_slots_[s] = device.allocate(kv_bytes_);
  }
  o_state_ = device.allocate(b * qh * local * hd * sizeof(float));
  m_state_ = device.allocate(b * qh * local * sizeof(float));
  l_state_ = device.allocate(b * qh * local * sizeof(float));
}

namespace {

// The step kernels move rows as 16-byte cp.async chunks (templates/step_fwd.cuh, step_bwd.cuh).
void check_pointer(const void* p, const char* name, size_t alignment, int rank) {
  if (!p) throw_bad_input("RingAttention: " + std::string(name) + " of rank " + std::to_string(rank) + " is null");
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0)
    throw_bad_input("RingAttention: " + std::string(name) + " of rank " + std::to_string(rank) +
                    " is not " + std::to_string(alignment) + "-byte aligned");
}

}  // namespace

void KernelRingBackend::bind(const ShardTensors& tensors) {
  check_pointer(tensors.q, "q", 16, rank_);
  check_pointer(tensors.k, "k", 16, rank_);
  check_pointer(tensors.v, "v", 16, rank_);
  check_pointer(tensors.out, "out", 16, rank_);
  check_pointer(tensors.lse, "lse", 4, rank_);
  // Only the forward's tensors: a backward must bind its own (bind_backward).
  tensors_ = {tensors.q, tensors.k, tensors.v, tensors.out, tensors.lse};
}

void KernelRingBackend::bind_backward(const ShardTensors& tensors) {
  bind(tensors);
  check_pointer(tensors.dout, "dout", 16, rank_);
  // dQ, dK, dV are written by the conversion kernel as 4-byte pairs; 16 keeps one rule for all.
  check_pointer(tensors.dq, "dq", 16, rank_);
  check_pointer(tensors.dk, "dk", 16, rank_);
  check_pointer(tensors.dv, "dv", 16, rank_);
  tensors_ = tensors;
}

std::vector<BufferView> KernelRingBackend::kv_buffers(int slot) {
  return {{k_slots_[slot].data(), kv_bytes_}, {v_slots_[slot].data(), kv_bytes_}};
}

void KernelRingBackend::forward_begin() {
  // The caller's K/V stay untouched: slot 0 is overwritten by the transfer of step 2.
  device_.copy(k_slots_[0].data(), tensors_.k, kv_bytes_);
  device_.copy(v_slots_[0].data(), tensors_.v, kv_bytes_);
}

RingFwdParams KernelRingBackend::step_params(const RingStep& step) const {
  const int64_t local = problem_.local_seq_len(), hd = problem_.head_dim;
  RingFwdParams p{};
  p.q = tensors_.q;
  p.k = k_slots_[step.kv_slot].data();
  p.v = v_slots_[step.kv_slot].data();
  p.out = tensors_.out;
  p.lse = tensors_.lse;
  p.o_state = o_state_.as<float>();
  p.m_state = m_state_.as<float>();
  p.l_state = l_state_.as<float>();
  p.q_positions = positions_.rank_positions(rank_);
  p.kv_positions = positions_.rank_positions(step.kv_rank);
  // Contiguous [batch, heads, local, head_dim].
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.out_row_stride = hd;
  p.q_head_stride = p.out_head_stride = local * hd;
  p.k_head_stride = p.v_head_stride = local * hd;
  p.q_batch_stride = p.out_batch_stride = problem_.q_heads * local * hd;
  p.k_batch_stride = p.v_batch_stride = problem_.kv_heads * local * hd;
  p.batch = static_cast<int>(problem_.batch);
  p.q_heads = static_cast<int>(problem_.q_heads);
  p.kv_heads = static_cast<int>(problem_.kv_heads);
  p.q_len = static_cast<int>(local);
  // A zigzag key-half step (the chunk of an earlier rank) sees only the first half of the chunk:
  // its second half lies after every local query. The launch covers that half alone, the shape
  // the tuner timed for this step type (workload_for); its keys keep their layout and positions.
  // With packed documents the first half of a chunk is not the earlier half of every document
  // (each document is cut into 2N chunks on its own), so the launch keeps the whole chunk; the key
  // intervals of the kernel it runs skip the tiles no query sees.
  const bool key_half = forward_shape(step_type_at(problem_, rank_, step.step)) == StepType::kZigzagKvHalf &&
                        problem_.documents.size() <= 1;
  p.kv_len = static_cast<int>(key_half ? local / 2 : local);
  p.scale_log2 = static_cast<float>(problem_.scale() * 1.4426950408889634);  // log2(e)
  p.is_first_step = step.is_first ? 1 : 0;
  p.is_last_step = step.is_last ? 1 : 0;
  // Mask features, for the kernels selection specializes on them (kernel_support.h); null and 0
  // for the others. The intervals are the rank's rows, in the order of its positions.
  if (kernel_needs_key_intervals(problem_)) {
    p.q_key_first = positions_.rank_key_first(rank_);
    p.q_key_last = positions_.rank_key_last(rank_);
  }
  p.softcap = kernel_needs_softcap(problem_) ? static_cast<float>(problem_.softcap) : 0.0f;
  return p;
}

// Each step runs the kernel selected for its step type (diagonal, full, zigzag half). A step whose
// chunk no local query sees launches nothing, unless it must start the state (first step) or
// finalize it (last step); the kernel's blocks then load no Q or K/V and only write the state.
void KernelRingBackend::forward_step(const RingStep& step) {
  if (!step.is_first && !step.is_last && !positions_.chunk_visible(rank_, step.kv_rank)) return;
  device_.launch_forward(step_type_at(problem_, rank_, step.step), step_params(step));
}

// ---- Backward ----------------------------------------------------------------------------------

int64_t KernelRingBackend::part_first_key(int part) const {
  const int64_t local = problem_.local_seq_len();
  return part <= 0 ? 0 : part >= parts_ ? local : local / 2;
}

size_t KernelRingBackend::part_bytes(int part) const {
  const int64_t keys = part_first_key(part + 1) - part_first_key(part);
  return static_cast<size_t>(problem_.batch * problem_.kv_heads * keys * problem_.head_dim) * sizeof(float);
}

void KernelRingBackend::allocate_dkv() {
  if (dk_slots_[0][0].data()) return;
  for (int s = 0; s < 2; ++s)
    for (int part = 0; part < parts_; ++part) {
      dk_slots_[s][part] = device_.allocate(part_bytes(part));
      dv_slots_[s][part] = device_.allocate(part_bytes(part));
    }
}

std::vector<BufferView> KernelRingBackend::dkv_part_buffers(int slot, int part) {
  allocate_dkv();
  return {{dk_slots_[slot][part].data(), part_bytes(part)}, {dv_slots_[slot][part].data(), part_bytes(part)}};
}

std::vector<BufferView> KernelRingBackend::dkv_buffers(int slot) {
  std::vector<BufferView> all;
  for (int part = 0; part < parts_; ++part)
    for (const BufferView& b : dkv_part_buffers(slot, part)) all.push_back(b);
  return all;
}

RingBwdPreParams KernelRingBackend::backward_pre_params() const {
  const int64_t local = problem_.local_seq_len(), hd = problem_.head_dim;
  RingBwdPreParams p{};
  p.out = tensors_.out;
  p.dout = tensors_.dout;
  p.delta = m_state_.as<float>();
  p.dq_acc = o_state_.as<float>();
  p.out_row_stride = p.dout_row_stride = hd;
  p.out_head_stride = p.dout_head_stride = local * hd;
  p.out_batch_stride = p.dout_batch_stride = problem_.q_heads * local * hd;
  p.batch = static_cast<int>(problem_.batch);
  p.q_heads = static_cast<int>(problem_.q_heads);
  p.q_len = static_cast<int>(local);
  return p;
}

RingBwdParams KernelRingBackend::backward_step_params(const RingStep& step, int dkv_slot, bool accumulate,
                                                      int part) const {
  const int64_t local = problem_.local_seq_len(), hd = problem_.head_dim;
  const int64_t key0 = part_first_key(part);
  const size_t key_offset = static_cast<size_t>(key0 * hd * dtype_bytes(problem_.dtype));
  RingBwdParams p{};
  p.q = tensors_.q;
  // The part's keys: the chunk's rows from key0 on, with the chunk's strides (K and V keep
  // their [batch, kv_heads, local, head_dim] layout; only kv_len and the start change).
  p.k = static_cast<const char*>(k_slots_[step.kv_slot].data()) + key_offset;
  p.v = static_cast<const char*>(v_slots_[step.kv_slot].data()) + key_offset;
  p.dout = tensors_.dout;
  p.lse = tensors_.lse;
  p.delta = m_state_.as<const float>();
  p.dq_acc = o_state_.as<float>();
  p.dk_acc = dk_slots_[dkv_slot][part].as<float>();
  p.dv_acc = dv_slots_[dkv_slot][part].as<float>();
  p.q_positions = positions_.rank_positions(rank_);
  p.kv_positions = positions_.rank_positions(step.kv_rank) + key0;
  // The local queries' key intervals (global positions, so the part's offset does not enter);
  // read only by kernels specialized on them, as the softcap is.
  p.q_key_first = positions_.rank_key_first(rank_);
  p.q_key_last = positions_.rank_key_last(rank_);
  p.softcap = static_cast<float>(problem_.softcap > 0 ? problem_.softcap : 0.0);
  // Contiguous [batch, heads, local, head_dim]; dout has q's layout.
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.dout_row_stride = hd;
  p.q_head_stride = p.dout_head_stride = local * hd;
  p.k_head_stride = p.v_head_stride = local * hd;
  p.q_batch_stride = p.dout_batch_stride = problem_.q_heads * local * hd;
  p.k_batch_stride = p.v_batch_stride = problem_.kv_heads * local * hd;
  p.batch = static_cast<int>(problem_.batch);
  p.q_heads = static_cast<int>(problem_.q_heads);
  p.kv_heads = static_cast<int>(problem_.kv_heads);
  p.q_len = static_cast<int>(local);
  p.kv_len = static_cast<int>(part_first_key(part + 1) - key0);
  p.scale = static_cast<float>(problem_.scale());
  p.scale_log2 = static_cast<float>(problem_.scale() * 1.4426950408889634);  // log2(e)
  p.accumulate_dkv = accumulate ? 1 : 0;
  return p;
}

RingBwdConvertParams KernelRingBackend::convert_params(const float* acc, void* grad, int64_t heads,
                                                       int64_t len) const {
  const int64_t local = problem_.local_seq_len(), hd = problem_.head_dim;
  RingBwdConvertParams p{};
  p.acc = acc;
  p.grad = grad;
  p.grad_row_stride = hd;
  p.grad_head_stride = local * hd;
  p.grad_batch_stride = heads * local * hd;
  p.batch = static_cast<int>(problem_.batch);
  p.heads = static_cast<int>(heads);
  p.len = static_cast<int>(len);
  return p;
}

void KernelRingBackend::backward_begin() {
  if (!tensors_.dout || !tensors_.dq)
    throw Error(ErrorKind::kInternal, "KernelRingBackend: backward without bind_backward");
  allocate_dkv();
  has_pending_step_ = false;
  device_.copy(k_slots_[0].data(), tensors_.k, kv_bytes_);
  device_.copy(v_slots_[0].data(), tensors_.v, kv_bytes_);
  device_.launch_backward_pre(backward_pre_params());
}

// The step's kernels need the held chunk's dK/dV accumulator parts, which the driver has received
// only when it calls accumulate_dkv_part; see the header.
void KernelRingBackend::backward_step(const RingStep& step) {
  pending_step_ = step;
  has_pending_step_ = true;
  next_part_ = 0;
}

void KernelRingBackend::accumulate_dkv_part(int slot, bool is_first, int part) {
  if (!has_pending_step_ || part != next_part_)
    throw Error(ErrorKind::kInternal, "KernelRingBackend: accumulate_dkv_part of part " + std::to_string(part) +
                                          " out of order (expected part " + std::to_string(next_part_) +
                                          " after a backward_step)");
  const StepType type = backward_of(step_type_at(problem_, rank_, pending_step_.step));
  // A chunk no local query sees adds nothing: in add mode the launch is skipped. The chunk's first
  // step still launches, since it defines the accumulator (every key block then writes zeros).
  if (is_first || positions_.chunk_visible(rank_, pending_step_.kv_rank))
    device_.launch_backward(type, backward_step_params(pending_step_, slot, !is_first, part));
  if (++next_part_ == parts_) has_pending_step_ = false;
}

void KernelRingBackend::accumulate_dkv(int slot, bool is_first) {
  for (int part = next_part_; part < parts_; ++part) accumulate_dkv_part(slot, is_first, part);
}

void KernelRingBackend::backward_end(int slot) {
  const int64_t hd = problem_.head_dim, local = problem_.local_seq_len();
  device_.launch_backward_convert(convert_params(o_state_.as<const float>(), tensors_.dq, problem_.q_heads, local));
  const size_t elem = dtype_bytes(problem_.dtype);
  for (int part = 0; part < parts_; ++part) {
    const int64_t key0 = part_first_key(part), keys = part_first_key(part + 1) - key0;
    // The part's rows start key0 rows into every head of the caller's dK and dV.
    void* dk = static_cast<char*>(tensors_.dk) + key0 * hd * elem;
    void* dv = static_cast<char*>(tensors_.dv) + key0 * hd * elem;
    device_.launch_backward_convert(convert_params(dk_slots_[slot][part].as<const float>(), dk, problem_.kv_heads, keys));
    device_.launch_backward_convert(convert_params(dv_slots_[slot][part].as<const float>(), dv, problem_.kv_heads, keys));
  }
}

}  // namespace cpgen
