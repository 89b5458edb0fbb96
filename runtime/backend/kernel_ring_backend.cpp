#include "runtime/backend/kernel_ring_backend.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "cpgen/error.h"
#include "runtime/core/attention_shape.h"
#include "runtime/core/layout_strides.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/ring/partition.h"

namespace cpgen {

RingPositions::RingPositions(const Problem& problem, KernelDevice& device) {
  const int n = static_cast<int>(problem.cp_size);
  const AttentionShape shape = attention_shape_of(problem);
  const std::vector<std::vector<int64_t>> ranks =
      partition_positions_all(problem.scheme, problem.seq_len, n, problem.documents);
  for (int r = 0; r < n; ++r) {
    offsets_.push_back(total_);
    lengths_.push_back(static_cast<int64_t>(ranks[static_cast<size_t>(r)].size()));
    total_ += lengths_.back();
    max_len_ = std::max(max_len_, lengths_.back());
  }
  check_kernel_ring_problem(problem);
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
  check_kernel_ring_problem(problem);
  len_ = positions.rank_len(rank);
  max_len_ = positions.max_rank_len();
  const size_t b = static_cast<size_t>(problem.batch), hd = static_cast<size_t>(problem.head_dim);
  const size_t qh = static_cast<size_t>(problem.q_heads), kvh = static_cast<size_t>(problem.kv_heads);
  // A slot holds any rank's chunk in that rank's layout: a dense tensor of its rows, at most
  // max_len_ of them. Every exchange moves the whole slot (see the header).
  slot_bytes_ = b * kvh * static_cast<size_t>(max_len_) * hd * dtype_bytes(problem.dtype);
  own_kv_bytes_ = b * kvh * static_cast<size_t>(len_) * hd * dtype_bytes(problem.dtype);
  parts_ = max_len_ >= 2 ? 2 : 1;
  // The zigzag half views need each rank's two chunks to be the first and second half of its
  // rows in sequence order (runtime/ring/kernel_support.h).
  halves_ = zigzag_steps_run_halves(problem);
  for (int s = 0; s < 2; ++s) {
    k_slots_[s] = device.allocate(std::max<size_t>(slot_bytes_, 1));
    v_slots_[s] = device.allocate(std::max<size_t>(slot_bytes_, 1));
  }
  // The state of this rank's own rows; a rank may hold none (tiny documents), yet keeps a buffer.
  const size_t rows = b * qh * static_cast<size_t>(std::max<int64_t>(len_, 1));
  o_state_ = device.allocate(rows * hd * sizeof(float));
  m_state_ = device.allocate(rows * sizeof(float));
  l_state_ = device.allocate(rows * sizeof(float));
}

int64_t KernelRingBackend::first_chunk_len(int rank) const {
  // Zigzag cuts the sequence into 2N chunks whose sizes differ by at most one, the first
  // seq_len mod 2N one longer (runtime/ring/partition.h); rank r's first chunk is chunk r.
  const int64_t chunks = 2 * problem_.cp_size;
  return problem_.seq_len / chunks + (rank < problem_.seq_len % chunks ? 1 : 0);
}

TensorStrides KernelRingBackend::chunk_strides(int origin) const {
  return layout_strides(problem_.layout, problem_.batch, problem_.kv_heads, positions_.rank_len(origin),
                        problem_.head_dim);
}

namespace {

// The step kernels move rows as 16-byte cp.async chunks (templates/step_fwd.cuh, step_bwd.cuh).
void check_pointer(const void* p, const char* name, size_t alignment, int rank) {
  if (!p) throw_bad_input("RingAttention: " + std::string(name) + " of rank " + std::to_string(rank) + " is null");
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0)
    throw_bad_input("RingAttention: " + std::string(name) + " of rank " + std::to_string(rank) +
                    " is not " + std::to_string(alignment) + "-byte aligned");
}

std::string strides_text(const TensorStrides& s) {
  return "{batch " + std::to_string(s.batch) + ", head " + std::to_string(s.head) + ", row " + std::to_string(s.row) + "}";
}

// Equal where it matters: a dimension of one entry never uses its stride.
bool same_strides(const TensorStrides& a, const TensorStrides& b, int64_t batch, int64_t heads, int64_t rows) {
  return (batch <= 1 || a.batch == b.batch) && (heads <= 1 || a.head == b.head) && (rows <= 1 || a.row == b.row);
}

// Byte offset of row `row` of a tensor with these strides.
size_t row_offset(const TensorStrides& s, int64_t row, Dtype dtype) {
  return static_cast<size_t>(row * s.row) * dtype_bytes(dtype);
}

const void* advance(const void* p, size_t bytes) { return static_cast<const char*>(p) + bytes; }
void* advance(void* p, size_t bytes) { return static_cast<char*>(p) + bytes; }

// The fields the forward and backward step params share: Q and K/V strides, head counts, and the
// launch's query rows [q0, len) while the running state keeps the rank's pitch (len rows).
template <class StepParams>
void set_step_shape(StepParams& p, const TensorStrides& q, const TensorStrides& kv, const Problem& problem,
                    int64_t q0, int64_t len) {
  p.q_batch_stride = q.batch;
  p.q_head_stride = q.head;
  p.q_row_stride = q.row;
  p.k_batch_stride = p.v_batch_stride = kv.batch;
  p.k_head_stride = p.v_head_stride = kv.head;
  p.k_row_stride = p.v_row_stride = kv.row;
  p.batch = static_cast<int>(problem.batch);
  p.q_heads = static_cast<int>(problem.q_heads);
  p.kv_heads = static_cast<int>(problem.kv_heads);
  p.q_len = static_cast<int>(len - q0);
  p.state_len = static_cast<int>(len);
}

}  // namespace

void KernelRingBackend::check_strides(const char* name, const TensorStrides& s, int64_t heads) const {
  check_tensor_strides(s, "RingAttention: " + std::string(name) + " of rank " + std::to_string(rank_), problem_.batch,
                       heads, len_, problem_.head_dim);
}

ShardTensors KernelRingBackend::empty_rank_tensors(const ShardTensors& given) const {
  // A framework hands an empty tensor over as a null pointer (PyTorch's data_ptr() is 0) with
  // whatever strides its shape gives, none of which the layout's rule for 0 rows has. Nothing of
  // such a rank's tensors is read or written (each copy and launch of it moves zero rows), so a
  // null pointer becomes this rank's own state buffer (allocated for one row at least, aligned
  // as every allocation) and the strides the layout's.
  ShardTensors t = given;
  void* placeholder = o_state_.data();
  for (const void** p : {&t.q, &t.k, &t.v, &t.dout})
    if (!*p) *p = placeholder;
  for (void** p : {&t.out, &t.dq, &t.dk, &t.dv})
    if (!*p) *p = placeholder;
  if (!t.lse) t.lse = static_cast<float*>(placeholder);
  t.strides = nullptr;
  return t;
}

void KernelRingBackend::bind(const ShardTensors& given) {
  const ShardTensors tensors = len_ == 0 ? empty_rank_tensors(given) : given;
  check_pointer(tensors.q, "q", 16, rank_);
  check_pointer(tensors.k, "k", 16, rank_);
  check_pointer(tensors.v, "v", 16, rank_);
  check_pointer(tensors.out, "out", 16, rank_);
  check_pointer(tensors.lse, "lse", 4, rank_);
  strides_ = tensors.strides ? *tensors.strides : layout_shard_strides(problem_, len_);
  check_strides("q", strides_.q, problem_.q_heads);
  check_strides("out", strides_.out, problem_.q_heads);
  // K and V travel the ring as their bytes, and a receiver reads them with strides it derives
  // from the problem's layout and the sender's row count: so they must be in that layout.
  const TensorStrides kv = chunk_strides(rank_);
  for (const auto& [name, s] : {std::pair<const char*, TensorStrides>{"k", strides_.k}, {"v", strides_.v}})
    if (!same_strides(s, kv, problem_.batch, problem_.kv_heads, len_))
      throw_bad_input("RingAttention: " + std::string(name) + " of rank " + std::to_string(rank_) + " has strides " +
                      strides_text(s) + "; allowed: those of the problem's layout " +
                      (problem_.layout.empty() ? std::string("bhsd") : problem_.layout) + ", " + strides_text(kv) +
                      " (K and V travel the ring as they are, and every rank reads them in that layout)");
  // Only the forward's tensors: a backward must bind its own (bind_backward).
  tensors_ = {tensors.q, tensors.k, tensors.v, tensors.out, tensors.lse};
}

void KernelRingBackend::bind_backward(const ShardTensors& given) {
  const ShardTensors tensors = len_ == 0 ? empty_rank_tensors(given) : given;
  bind(tensors);
  check_pointer(tensors.dout, "dout", 16, rank_);
  // dQ, dK, dV are written by the conversion kernel as 4-byte pairs; 16 keeps one rule for all.
  check_pointer(tensors.dq, "dq", 16, rank_);
  check_pointer(tensors.dk, "dk", 16, rank_);
  check_pointer(tensors.dv, "dv", 16, rank_);
  check_strides("dout", strides_.dout, problem_.q_heads);
  check_strides("dq", strides_.dq, problem_.q_heads);
  check_strides("dk", strides_.dk, problem_.kv_heads);
  check_strides("dv", strides_.dv, problem_.kv_heads);
  tensors_ = tensors;
  tensors_.strides = nullptr;  // resolved into strides_
}

std::vector<BufferView> KernelRingBackend::kv_buffers(int slot) {
  return {{k_slots_[slot].data(), slot_bytes_}, {v_slots_[slot].data(), slot_bytes_}};
}

bool KernelRingBackend::own_kv_in_place() const {
  // The caller's K/V are dense in the problem's layout (bind checks it), so they span exactly
  // own_kv_bytes_; the exchange moves slot_bytes_, which only a rank of the largest chunk has.
  return own_kv_bytes_ == slot_bytes_;
}

std::vector<BufferView> KernelRingBackend::first_kv_send_buffers() {
  if (!own_kv_in_place()) return kv_buffers(0);
  // The transport only reads a send buffer.
  return {{const_cast<void*>(tensors_.k), slot_bytes_}, {const_cast<void*>(tensors_.v), slot_bytes_}};
}

void KernelRingBackend::stage_own_kv() {
  // Step 0 computes on the caller's K/V in place; only a rank holding fewer rows than the largest
  // chunk copies them into slot 0, so that the first exchange has slot_bytes_ to send. Slot 0 is
  // first received into at step 1 (the chunk of step 2), so the caller's K/V are never written.
  if (own_kv_in_place()) return;
  for (auto [slot, own] : {std::pair{&k_slots_[0], tensors_.k}, std::pair{&v_slots_[0], tensors_.v}}) {
    auto* bytes = static_cast<unsigned char*>(slot->data());
    if (own_kv_bytes_ > 0) device_.copy(bytes, own, own_kv_bytes_);
    // The slot's rows past this rank's own travel too, unread: they are zeroed so that no
    // exchange copies memory nothing wrote (compute-sanitizer's initcheck reported each such
    // copy on the first H100).
    device_.zero(bytes + own_kv_bytes_, slot_bytes_ - own_kv_bytes_);
  }
}

void KernelRingBackend::forward_begin() { stage_own_kv(); }

// The local queries a step launches over: [query_first, len_). A zigzag query-half step (a chunk
// of a later rank) is seen by the rank's second chunk only, so it launches over those rows: the
// shape the tuner timed (workload_for). Not on the last step, which must write out and lse of
// every row (its first-chunk rows then run with every key tile skipped), nor with a kernel whose
// family cannot launch over a view (none today: kernel_support.h).
int64_t KernelRingBackend::query_first(const RingStep& step, bool backward) const {
  if (!halves_) return 0;
  const StepType type = step_type_at(problem_, rank_, step.step);
  if (forward_shape(type) != StepType::kZigzagQHalf || (!backward && step.is_last)) return 0;
  // A forward kernel that cannot write the state at another row pitch runs the step over every
  // row (runtime/ring/kernel_support.h, KernelFamilyAbilities::query_view).
  if (!backward && !device_.forward_takes_query_view(type)) return 0;
  return first_chunk_len(rank_);
}

RingFwdParams KernelRingBackend::step_params(const RingStep& step) const {
  const int64_t q0 = query_first(step, false);
  const size_t q_offset = row_offset(strides_.q, q0, problem_.dtype);
  const size_t out_offset = row_offset(strides_.out, q0, problem_.dtype);
  RingFwdParams p{};
  p.q = advance(tensors_.q, q_offset);
  // Step 0 holds the rank's own chunk: the caller's K/V, read in place.
  p.k = step.step == 0 ? tensors_.k : k_slots_[step.kv_slot].data();
  p.v = step.step == 0 ? tensors_.v : v_slots_[step.kv_slot].data();
  p.out = advance(tensors_.out, out_offset);
  p.lse = tensors_.lse + q0;
  p.o_state = o_state_.as<float>() + q0 * problem_.head_dim;
  p.m_state = m_state_.as<float>() + q0;
  p.l_state = l_state_.as<float>() + q0;
  p.q_positions = positions_.rank_positions(rank_) + q0;
  p.kv_positions = positions_.rank_positions(step.kv_rank);
  const TensorStrides kv = chunk_strides(step.kv_rank);
  set_step_shape(p, strides_.q, kv, problem_, q0, len_);
  p.out_batch_stride = strides_.out.batch;
  p.out_head_stride = strides_.out.head;
  p.out_row_stride = strides_.out.row;
  // A zigzag key-half step (the chunk of an earlier rank) sees only the sender's first chunk:
  // its second lies after every local query. The launch covers those keys alone, the shape the
  // tuner timed for this step type (workload_for); they keep their layout and positions. With
  // packed documents there are no such halves (halves_), and every step keeps the whole chunk; the
  // key intervals of the kernel it runs skip the tiles no query sees.
  const bool key_half = halves_ && forward_shape(step_type_at(problem_, rank_, step.step)) == StepType::kZigzagKvHalf;
  p.kv_len = static_cast<int>(key_half ? first_chunk_len(step.kv_rank) : positions_.rank_len(step.kv_rank));
  p.scale_log2 = static_cast<float>(problem_.scale() * 1.4426950408889634);  // log2(e)
  p.is_first_step = step.is_first ? 1 : 0;
  p.is_last_step = step.is_last ? 1 : 0;
  // Mask features, for the kernels selection specializes on them (kernel_support.h); null and 0
  // for the others. The intervals are the launch's rows (a query view starts at q0).
  if (kernel_needs_key_intervals(problem_)) {
    p.q_key_first = positions_.rank_key_first(rank_) + q0;
    p.q_key_last = positions_.rank_key_last(rank_) + q0;
  }
  p.softcap = kernel_needs_softcap(problem_) ? static_cast<float>(problem_.softcap) : 0.0f;
  return p;
}

// Each step runs the kernel selected for its step type (diagonal, full, zigzag half). A launch
// over no queries has nothing to do (a rank without rows, an empty query view), and one over no
// keys neither, except on the last step, which still writes every row's out and lse. A step whose
// chunk no local query sees launches nothing either, unless it must start the state (first step)
// or finalize it (last step); the kernel's blocks then load no Q or K/V and only write the state.
std::optional<RingFwdParams> KernelRingBackend::forward_launch(const RingStep& step) const {
  const RingFwdParams params = step_params(step);
  if (params.q_len == 0 || (params.kv_len == 0 && !step.is_last)) return std::nullopt;
  if (!step.is_first && !step.is_last && !positions_.chunk_visible(rank_, step.kv_rank)) return std::nullopt;
  return params;
}

void KernelRingBackend::forward_step(const RingStep& step) {
  if (const std::optional<RingFwdParams> params = forward_launch(step))
    device_.launch_forward(step_type_at(problem_, rank_, step.step), *params);
}

// ---- Backward ----------------------------------------------------------------------------------

int64_t KernelRingBackend::part_first_key(int part) const {
  return part <= 0 ? 0 : part >= parts_ ? max_len_ : max_len_ / 2;
}

size_t KernelRingBackend::part_bytes(int part) const {
  const int64_t keys = part_first_key(part + 1) - part_first_key(part);
  return static_cast<size_t>(problem_.batch * problem_.kv_heads * keys * problem_.head_dim) * sizeof(float);
}

void KernelRingBackend::allocate_dkv() {
  if (dk_slots_[0][0].data()) return;
  // A part holds the keys of the largest chunk; a smaller chunk's gradients leave its last rows
  // unwritten, and the exchange moves them all. Zeroed once: afterwards each row holds the
  // gradient of some earlier chunk, written, unread. All or nothing: made aside and kept only
  // once every buffer is there, so a failure (out of device memory) leaves none, and the next
  // backward allocates them again (it found the first one and went on with the others null).
  const bool zero_tails = !positions_.equal_shards();
  DeviceAllocation dk[2][2], dv[2][2];
  for (int s = 0; s < 2; ++s)
    for (int part = 0; part < parts_; ++part) {
      dk[s][part] = device_.allocate(part_bytes(part));
      dv[s][part] = device_.allocate(part_bytes(part));
      if (zero_tails) {
        device_.zero(dk[s][part].data(), part_bytes(part));
        device_.zero(dv[s][part].data(), part_bytes(part));
      }
    }
  for (int s = 0; s < 2; ++s)
    for (int part = 0; part < parts_; ++part) {
      dk_slots_[s][part] = std::move(dk[s][part]);
      dv_slots_[s][part] = std::move(dv[s][part]);
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
  RingBwdPreParams p{};
  p.out = tensors_.out;
  p.dout = tensors_.dout;
  p.delta = m_state_.as<float>();
  p.dq_acc = o_state_.as<float>();
  p.out_batch_stride = strides_.out.batch;
  p.out_head_stride = strides_.out.head;
  p.out_row_stride = strides_.out.row;
  p.dout_batch_stride = strides_.dout.batch;
  p.dout_head_stride = strides_.dout.head;
  p.dout_row_stride = strides_.dout.row;
  p.batch = static_cast<int>(problem_.batch);
  p.q_heads = static_cast<int>(problem_.q_heads);
  p.q_len = static_cast<int>(len_);
  return p;
}

RingBwdParams KernelRingBackend::backward_step_params(const RingStep& step, int dkv_slot, bool accumulate,
                                                      int part) const {
  const int64_t hd = problem_.head_dim;
  // The part's keys of the held chunk: the part's range of the slot, cut at the chunk's length.
  const int64_t chunk_len = positions_.rank_len(step.kv_rank);
  const int64_t key0 = std::min(part_first_key(part), chunk_len);
  const int64_t key_end = std::min(part_first_key(part + 1), chunk_len);
  const TensorStrides kv = chunk_strides(step.kv_rank);
  const size_t key_offset = row_offset(kv, key0, problem_.dtype);
  const int64_t q0 = query_first(step, true);
  RingBwdParams p{};
  p.q = advance(tensors_.q, row_offset(strides_.q, q0, problem_.dtype));
  // The part's keys: the chunk's rows from key0 on, with the chunk's strides (only kv_len and
  // the start change). Step 0's chunk is the caller's own K/V, read in place.
  p.k = advance(step.step == 0 ? tensors_.k : k_slots_[step.kv_slot].data(), key_offset);
  p.v = advance(step.step == 0 ? tensors_.v : v_slots_[step.kv_slot].data(), key_offset);
  p.dout = advance(tensors_.dout, row_offset(strides_.dout, q0, problem_.dtype));
  p.lse = tensors_.lse + q0;
  p.delta = m_state_.as<const float>() + q0;
  p.dq_acc = o_state_.as<float>() + q0 * hd;
  p.dk_acc = dk_slots_[dkv_slot][part].as<float>();
  p.dv_acc = dv_slots_[dkv_slot][part].as<float>();
  p.q_positions = positions_.rank_positions(rank_) + q0;
  // Mask features as the forward's (step_params): null and 0 for kernels not specialized on them.
  if (kernel_needs_key_intervals(problem_)) {
    p.q_key_first = positions_.rank_key_first(rank_) + q0;
    p.q_key_last = positions_.rank_key_last(rank_) + q0;
  }
  p.softcap = kernel_needs_softcap(problem_) ? static_cast<float>(problem_.softcap) : 0.0f;
  p.kv_positions = positions_.rank_positions(step.kv_rank) + key0;
  set_step_shape(p, strides_.q, kv, problem_, q0, len_);
  p.dout_batch_stride = strides_.dout.batch;
  p.dout_head_stride = strides_.dout.head;
  p.dout_row_stride = strides_.dout.row;
  p.kv_len = static_cast<int>(key_end - key0);
  p.scale = static_cast<float>(problem_.scale());
  p.scale_log2 = static_cast<float>(problem_.scale() * 1.4426950408889634);  // log2(e)
  p.accumulate_dkv = accumulate ? 1 : 0;
  return p;
}

RingBwdConvertParams KernelRingBackend::convert_params(const float* acc, void* grad, const TensorStrides& grad_strides,
                                                       int64_t heads, int64_t len) const {
  RingBwdConvertParams p{};
  p.acc = acc;
  p.grad = grad;
  p.grad_batch_stride = grad_strides.batch;
  p.grad_head_stride = grad_strides.head;
  p.grad_row_stride = grad_strides.row;
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
  stage_own_kv();
  if (len_ > 0) device_.launch_backward_pre(backward_pre_params());
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
  const RingBwdParams params = backward_step_params(pending_step_, slot, !is_first, part);
  // A part past the end of a shorter chunk holds none of its keys: no rank reads it. A launch
  // over no queries adds nothing; it is never a write-mode one, which only the chunk's owner
  // runs, and the owner has as many queries as the chunk has keys. A chunk no local query sees
  // adds nothing either: in add mode the launch is skipped; the chunk's first step still
  // launches, since it defines the accumulator (every key block then writes zeros).
  if (params.kv_len > 0 && params.q_len > 0 && (is_first || positions_.chunk_visible(rank_, pending_step_.kv_rank)))
    device_.launch_backward(type, params);
  if (++next_part_ == parts_) has_pending_step_ = false;
}

void KernelRingBackend::accumulate_dkv(int slot, bool is_first) {
  for (int part = next_part_; part < parts_; ++part) accumulate_dkv_part(slot, is_first, part);
}

void KernelRingBackend::backward_end(int slot) {
  if (len_ == 0) return;
  device_.launch_backward_convert(convert_params(o_state_.as<const float>(), tensors_.dq, strides_.dq,
                                                 problem_.q_heads, len_));
  for (int part = 0; part < parts_; ++part) {
    const int64_t key0 = std::min(part_first_key(part), len_), keys = std::min(part_first_key(part + 1), len_) - key0;
    if (keys == 0) continue;
    // The part's rows start key0 rows into every head of the caller's dK and dV.
    void* dk = advance(tensors_.dk, row_offset(strides_.dk, key0, problem_.dtype));
    void* dv = advance(tensors_.dv, row_offset(strides_.dv, key0, problem_.dtype));
    device_.launch_backward_convert(
        convert_params(dk_slots_[slot][part].as<const float>(), dk, strides_.dk, problem_.kv_heads, keys));
    device_.launch_backward_convert(
        convert_params(dv_slots_[slot][part].as<const float>(), dv, strides_.dv, problem_.kv_heads, keys));
  }
}

}  // namespace cpgen
