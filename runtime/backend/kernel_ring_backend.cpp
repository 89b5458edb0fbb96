#include "runtime/backend/kernel_ring_backend.h"

#include <cstdint>
#include <string>

#include "cpgen/error.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/ring/partition.h"

namespace cpgen {

RingPositions::RingPositions(const Problem& problem, KernelDevice& device)
    : local_len_(problem.local_seq_len()) {
  check_kernel_ring_problem(problem);  // equal shards, no mask features: what the kernels run
  const int n = static_cast<int>(problem.cp_size);
  std::vector<int> host(static_cast<size_t>(n * local_len_));
  for (int r = 0; r < n; ++r) {
    std::vector<int64_t> positions = partition_positions(problem.scheme, problem.seq_len, n, r);
    for (int64_t i = 0; i < local_len_; ++i) host[r * local_len_ + i] = static_cast<int>(positions[i]);
  }
  table_ = device.allocate(host.size() * sizeof(int));
  device.upload(table_.data(), host.data(), host.size() * sizeof(int));
}

const int* RingPositions::rank_positions(int rank) const { return table_.as<const int>() + rank * local_len_; }

KernelRingBackend::KernelRingBackend(const Problem& problem, int rank, KernelDevice& device,
                                     const RingPositions& positions)
    : problem_(problem), rank_(rank), device_(device), positions_(positions) {
  check_kernel_ring_problem(problem);
  const size_t local = static_cast<size_t>(problem.local_seq_len());
  const size_t b = static_cast<size_t>(problem.batch), hd = static_cast<size_t>(problem.head_dim);
  const size_t qh = static_cast<size_t>(problem.q_heads), kvh = static_cast<size_t>(problem.kv_heads);
  kv_bytes_ = b * kvh * local * hd * dtype_bytes(problem.dtype);
  for (int s = 0; s < 2; ++s) {
    k_slots_[s] = device.allocate(kv_bytes_);
    v_slots_[s] = device.allocate(kv_bytes_);
  }
  o_state_ = device.allocate(b * qh * local * hd * sizeof(float));
  m_state_ = device.allocate(b * qh * local * sizeof(float));
  l_state_ = device.allocate(b * qh * local * sizeof(float));
}

void KernelRingBackend::bind(const ShardTensors& tensors) {
  // The step kernels move rows as 16-byte cp.async chunks (templates/step_fwd.cuh).
  auto aligned = [&](const void* p, const char* name, size_t alignment) {
    if (!p) throw_bad_input("RingAttention: " + std::string(name) + " of rank " + std::to_string(rank_) + " is null");
    if (reinterpret_cast<uintptr_t>(p) % alignment != 0)
      throw_bad_input("RingAttention: " + std::string(name) + " of rank " + std::to_string(rank_) +
                      " is not " + std::to_string(alignment) + "-byte aligned");
  };
  aligned(tensors.q, "q", 16);
  aligned(tensors.k, "k", 16);
  aligned(tensors.v, "v", 16);
  aligned(tensors.out, "out", 16);
  aligned(tensors.lse, "lse", 4);
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
  p.kv_len = static_cast<int>(local);
  p.scale_log2 = static_cast<float>(problem_.scale() * 1.4426950408889634);  // log2(e)
  p.is_first_step = step.is_first ? 1 : 0;
  p.is_last_step = step.is_last ? 1 : 0;
  return p;
}

// Each step runs the kernel selected for its step type (diagonal, full, zigzag half).
void KernelRingBackend::forward_step(const RingStep& step) {
  device_.launch_forward(step_type_at(problem_, rank_, step.step), step_params(step));
}

namespace {
[[noreturn]] void no_backward() {
  throw Error(ErrorKind::kBadInput,
              "the kernel ring backend has no backward yet; the backward ring runs on the CPU "
              "backend only (cpgen verify --backend cpu)");
}
}  // namespace

std::vector<BufferView> KernelRingBackend::dkv_buffers(int) { no_backward(); }
void KernelRingBackend::backward_begin() { no_backward(); }
void KernelRingBackend::backward_step(const RingStep&) { no_backward(); }
void KernelRingBackend::accumulate_dkv(int, bool) { no_backward(); }
void KernelRingBackend::backward_end(int) { no_backward(); }

}  // namespace cpgen
