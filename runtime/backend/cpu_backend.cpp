#include "runtime/backend/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "cpgen/error.h"
#include "runtime/ring/cpu_softmax_state.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/schedule.h"

namespace cpgen {
namespace {

// Dot products accumulate in double and round once to float (an fp32 MMA accumulator does
// no better, so this keeps the CPU path's error at or below the kernel's); everything
// elementwise and all state stay fp32. Float accumulation here raised the gradients' error on
// the large-logits vectors from 3.8e-6 to 5.3e-6.
float dot(const float* a, const float* b, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(sum);
}

// Which (query, key) pairs of a step count, decided per tile with the schedule's classify_tile,
// as the step kernel decides: a skipped tile is never computed, a full tile needs no mask, and
// only masked tiles test each element. classify_tile knows only the causal mask; every other
// mask of the model (documents, windows) narrows the causal interval, so a tile it skips stays
// skipped, and its full tiles are tested against each query's visible interval. A wrong
// classification changes the result, so the vectors tests of the CPU ring check classify_tile on
// every scheme and ring size.
class StepMask {
 public:
  static constexpr int64_t kTile = 16;

  StepMask(const AttentionShape& shape, const std::vector<int64_t>& q_pos,
           const std::vector<int64_t>& k_pos)
      : k_pos_(k_pos), k_tiles_((static_cast<int64_t>(k_pos.size()) + kTile - 1) / kTile),
        only_causal_(shape.window_left < 0 && (shape.causal || shape.window_right < 0) &&
                     shape.cu_seqlens.size() <= 2) {
    const int64_t q_len = static_cast<int64_t>(q_pos.size());
    const int64_t k_len = static_cast<int64_t>(k_pos.size());
    for (int64_t q0 = 0; q0 < q_len; q0 += kTile)
      for (int64_t k0 = 0; k0 < k_len; k0 += kTile)
        kinds_.push_back(classify_tile(q_pos[q0], q_pos[std::min(q_len, q0 + kTile) - 1],
                                       k_pos[k0], k_pos[std::min(k_len, k0 + kTile) - 1],
                                       shape.causal));
    for (int64_t pos : q_pos) keys_.push_back(visible_keys(shape, pos));
  }

  bool visible(int64_t i, int64_t j) const {
    switch (kinds_[(i / kTile) * k_tiles_ + j / kTile]) {
      case TileWork::kSkip: return false;
      case TileWork::kFull: return only_causal_ || keys_[i].contains(k_pos_[j]);
      case TileWork::kMasked: return keys_[i].contains(k_pos_[j]);
    }
    return false;
  }

 private:
  const std::vector<int64_t>& k_pos_;
  int64_t k_tiles_;
  bool only_causal_;  // no mask beyond causal / full: classify_tile's kFull is exact
  std::vector<TileWork> kinds_;
  std::vector<KeyInterval> keys_;  // per local query
};

// The logit of a visible pair in the log2 domain, from its raw q . k (attention_logit in fp32):
// scale log2(e) q.k, or with a softcap c, c tanh(scale q.k / c) log2(e).
float logit_log2(const AttentionShape& s, float q_dot_k) {
  const float scaled = q_dot_k * static_cast<float>(s.scale);
  if (!(s.softcap > 0)) return scaled * cpu::kLog2e;
  const float cap = static_cast<float>(s.softcap);
  return cap * std::tanh(scaled / cap) * cpu::kLog2e;
}

void expect_size(const std::vector<float>& t, int64_t want, const char* name, int rank) {
  if (static_cast<int64_t>(t.size()) != want)
    throw_bad_input("CPU backend, rank " + std::to_string(rank) + ": " + name + " has " +
                    std::to_string(t.size()) + " elements; the layout needs " +
                    std::to_string(want));
}

}  // namespace

std::vector<int64_t> RingLayout::documents() const {
  std::vector<int64_t> lengths;
  for (size_t i = 1; i < shape.cu_seqlens.size(); ++i)
    lengths.push_back(shape.cu_seqlens[i] - shape.cu_seqlens[i - 1]);
  return lengths;
}

std::vector<std::vector<int64_t>> RingLayout::rank_positions() const {
  return partition_positions_all(scheme, seq_len, cp_size, documents());
}

CpuBackend::CpuBackend(const RingLayout& layout, int rank, RankTensors& tensors)
    : layout_(layout), rank_(rank), tensors_(tensors) {
  check_attention_shape(layout.shape);
  if (rank < 0 || rank >= layout.cp_size)
    throw_bad_input("CPU backend: rank " + std::to_string(rank) + " is outside [0, " +
                    std::to_string(layout.cp_size) + ")");
  positions_ = layout.rank_positions();
  const AttentionShape& s = layout.shape;
  local_len_ = static_cast<int64_t>(positions_[rank].size());
  max_len_ = 0;
  for (const std::vector<int64_t>& p : positions_)
    max_len_ = std::max<int64_t>(max_len_, static_cast<int64_t>(p.size()));
  rows_ = s.batch * s.q_heads * local_len_;
  q_size_ = rows_ * s.head_dim;
  kv_size_ = s.batch * s.kv_heads * local_len_ * s.head_dim;
  slot_size_ = s.batch * s.kv_heads * max_len_ * s.head_dim;
  for (KvChunk* c : {&kv_[0], &kv_[1], &dkv_[0], &dkv_[1], &dkv_partial_}) {
    c->k.assign(slot_size_, 0.0f);
    c->v.assign(slot_size_, 0.0f);
  }
}

namespace {

// [heads, from_len, dim] rows -> [heads, to_len, dim] rows, the first min(from_len, to_len) of
// each head: own K/V into a max_len slot, and a slot's own-length rows back out.
void copy_rows(const std::vector<float>& from, int64_t from_len, std::vector<float>& to,
               int64_t to_len, int64_t heads, int64_t dim) {
  const int64_t rows = std::min(from_len, to_len);
  for (int64_t h = 0; h < heads; ++h)
    std::copy(from.begin() + h * from_len * dim, from.begin() + (h * from_len + rows) * dim,
              to.begin() + h * to_len * dim);
}

}  // namespace

std::vector<BufferView> CpuBackend::kv_buffers(int slot) {
  KvChunk& c = kv_[slot & 1];
  return {{c.k.data(), c.k.size() * sizeof(float)}, {c.v.data(), c.v.size() * sizeof(float)}};
}

std::vector<BufferView> CpuBackend::dkv_buffers(int slot) {
  KvChunk& c = dkv_[slot & 1];
  return {{c.k.data(), c.k.size() * sizeof(float)}, {c.v.data(), c.v.size() * sizeof(float)}};
}

void CpuBackend::forward_begin() {
  expect_size(tensors_.q, q_size_, "q", rank_);
  expect_size(tensors_.k, kv_size_, "k", rank_);
  expect_size(tensors_.v, kv_size_, "v", rank_);
  const AttentionShape& s = layout_.shape;
  copy_rows(tensors_.k, local_len_, kv_[0].k, max_len_, s.batch * s.kv_heads, s.head_dim);
  copy_rows(tensors_.v, local_len_, kv_[0].v, max_len_, s.batch * s.kv_heads, s.head_dim);
  o_state_.assign(q_size_, 0.0f);
  m_state_.assign(rows_, cpu::kMinusInf);
  l_state_.assign(rows_, 0.0f);
}

void CpuBackend::forward_step(const RingStep& step) {
  const AttentionShape& s = layout_.shape;
  const int64_t dim = s.head_dim, group = s.group();
  const std::vector<int64_t>& q_pos = positions_[rank_];
  const std::vector<int64_t>& k_pos = positions_[step.kv_rank];
  const int64_t q_len = local_len_, k_len = static_cast<int64_t>(k_pos.size());
  const KvChunk& chunk = kv_[step.kv_slot & 1];
  if (step.is_first) {  // like the kernel: the first step ignores whatever state is in memory
    std::fill(o_state_.begin(), o_state_.end(), 0.0f);
    std::fill(m_state_.begin(), m_state_.end(), cpu::kMinusInf);
    std::fill(l_state_.begin(), l_state_.end(), 0.0f);
  }
  const StepMask mask(s, q_pos, k_pos);
  std::vector<float> scores(k_len), chunk_o(dim);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.q_heads; ++h) {
      // The slot holds max_len rows per head; the chunk's own k_len of them are real.
      const int64_t kv_head = b * s.kv_heads + h / group;
      const float* k_head = chunk.k.data() + kv_head * max_len_ * dim;
      const float* v_head = chunk.v.data() + kv_head * max_len_ * dim;
      for (int64_t i = 0; i < q_len; ++i) {
        const int64_t row = (b * s.q_heads + h) * q_len + i;
        const float* q_row = tensors_.q.data() + row * dim;
        // This chunk's own state (m_c, l_c, o_c), then one merge into the running state.
        float chunk_m = cpu::kMinusInf;
        for (int64_t j = 0; j < k_len; ++j) {
          scores[j] = mask.visible(i, j) ? logit_log2(s, dot(q_row, k_head + j * dim, dim))
                                         : cpu::kMinusInf;
          chunk_m = std::fmax(chunk_m, scores[j]);
        }
        float chunk_l = 0;
        std::fill(chunk_o.begin(), chunk_o.end(), 0.0f);
        if (chunk_m != cpu::kMinusInf)
          for (int64_t j = 0; j < k_len; ++j) {
            if (scores[j] == cpu::kMinusInf) continue;
            const float p = std::exp2(scores[j] - chunk_m);
            chunk_l += p;
            for (int64_t d = 0; d < dim; ++d) chunk_o[d] += p * v_head[j * dim + d];
          }
        cpu::merge_softmax_state(m_state_[row], l_state_[row], o_state_.data() + row * dim,
                                 chunk_m, chunk_l, chunk_o.data(), dim);
      }
    }
  if (step.is_last) {
    // Outputs the caller sized are written in place (every element), like device outputs.
    if (static_cast<int64_t>(tensors_.out.size()) != q_size_) tensors_.out.resize(q_size_);
    if (static_cast<int64_t>(tensors_.lse.size()) != rows_) tensors_.lse.resize(rows_);
    for (int64_t row = 0; row < rows_; ++row)
      tensors_.lse[row] =
          cpu::finish_softmax_state(m_state_[row], l_state_[row], o_state_.data() + row * dim,
                                    tensors_.out.data() + row * dim, dim);
  }
}

void CpuBackend::backward_begin() {
  expect_size(tensors_.q, q_size_, "q", rank_);
  expect_size(tensors_.k, kv_size_, "k", rank_);
  expect_size(tensors_.v, kv_size_, "v", rank_);
  expect_size(tensors_.dout, q_size_, "dout", rank_);
  expect_size(tensors_.out, q_size_, "out", rank_);
  expect_size(tensors_.lse, rows_, "lse", rank_);
  const AttentionShape& s = layout_.shape;
  copy_rows(tensors_.k, local_len_, kv_[0].k, max_len_, s.batch * s.kv_heads, s.head_dim);
  copy_rows(tensors_.v, local_len_, kv_[0].v, max_len_, s.batch * s.kv_heads, s.head_dim);
  const int64_t dim = s.head_dim;
  dq_.assign(q_size_, 0.0f);
  // D_i = sum_j P_ij dP_ij = dO_i . O_i: the softmax Jacobian's correction term, per row.
  delta_.assign(rows_, 0.0f);
  for (int64_t row = 0; row < rows_; ++row)
    delta_[row] = dot(tensors_.dout.data() + row * dim, tensors_.out.data() + row * dim, dim);
}

void CpuBackend::backward_step(const RingStep& step) {
  const AttentionShape& s = layout_.shape;
  const int64_t dim = s.head_dim, group = s.group();
  const std::vector<int64_t>& q_pos = positions_[rank_];
  const std::vector<int64_t>& k_pos = positions_[step.kv_rank];
  const int64_t q_len = local_len_, k_len = static_cast<int64_t>(k_pos.size());
  const KvChunk& chunk = kv_[step.kv_slot & 1];
  std::fill(dkv_partial_.k.begin(), dkv_partial_.k.end(), 0.0f);
  std::fill(dkv_partial_.v.begin(), dkv_partial_.v.end(), 0.0f);
  const float scale = static_cast<float>(s.scale);
  const float inv_cap = s.softcap > 0 ? static_cast<float>(1.0 / s.softcap) : 0.0f;
  const StepMask mask(s, q_pos, k_pos);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t kv_head = b * s.kv_heads + h / group;
      const float* k_head = chunk.k.data() + kv_head * max_len_ * dim;
      const float* v_head = chunk.v.data() + kv_head * max_len_ * dim;
      float* dk_head = dkv_partial_.k.data() + kv_head * max_len_ * dim;
      float* dv_head = dkv_partial_.v.data() + kv_head * max_len_ * dim;
      for (int64_t i = 0; i < q_len; ++i) {
        const int64_t row = (b * s.q_heads + h) * q_len + i;
        const float lse = tensors_.lse[row];
        if (lse == cpu::kMinusInf) continue;  // the row saw no key: no gradient flows
        const float lse_log2 = lse * cpu::kLog2e;
        const float* q_row = tensors_.q.data() + row * dim;
        const float* do_row = tensors_.dout.data() + row * dim;
        float* dq_row = dq_.data() + row * dim;
        for (int64_t j = 0; j < k_len; ++j) {
          if (!mask.visible(i, j)) continue;
          const float* k_row = k_head + j * dim;
          // P_ij = exp(t - lse) = exp2(t log2(e) - lse log2(e)), exactly the forward's
          // normalized probability; dT = P (dP - D) with dP = dO_i . v_j, and through a softcap
          // c (t = c tanh(scale q.k / c)) dS = dT (1 - (t / c)^2).
          const float logit2 = logit_log2(s, dot(q_row, k_row, dim));
          const float p = std::exp2(logit2 - lse_log2);
          float ds = p * (dot(do_row, v_head + j * dim, dim) - delta_[row]);
          if (inv_cap > 0) {
            const float t_over_c = logit2 * cpu::kLn2 * inv_cap;
            ds *= 1.0f - t_over_c * t_over_c;
          }
          for (int64_t d = 0; d < dim; ++d) {
            dq_row[d] += scale * ds * k_row[d];
            dk_head[j * dim + d] += scale * ds * q_row[d];
            dv_head[j * dim + d] += p * do_row[d];
          }
        }
      }
    }
}

void CpuBackend::accumulate_dkv(int slot, bool is_first) {
  KvChunk& acc = dkv_[slot & 1];
  if (is_first) {
    // Copy into the existing storage: the transport holds pointers to it.
    std::copy(dkv_partial_.k.begin(), dkv_partial_.k.end(), acc.k.begin());
    std::copy(dkv_partial_.v.begin(), dkv_partial_.v.end(), acc.v.begin());
    return;
  }
  for (int64_t e = 0; e < slot_size_; ++e) {
    acc.k[e] += dkv_partial_.k[e];
    acc.v[e] += dkv_partial_.v[e];
  }
}

void CpuBackend::backward_end(int slot) {
  if (tensors_.dq.size() != dq_.size()) tensors_.dq.resize(dq_.size());
  std::copy(dq_.begin(), dq_.end(), tensors_.dq.begin());
  // The slot holds this rank's own chunk in max_len rows per head; its first local_len are real.
  const AttentionShape& s = layout_.shape;
  for (std::vector<float>* out : {&tensors_.dk, &tensors_.dv})
    if (static_cast<int64_t>(out->size()) != kv_size_) out->resize(kv_size_);
  copy_rows(dkv_[slot & 1].k, max_len_, tensors_.dk, local_len_, s.batch * s.kv_heads, s.head_dim);
  copy_rows(dkv_[slot & 1].v, max_len_, tensors_.dv, local_len_, s.batch * s.kv_heads, s.head_dim);
}

}  // namespace cpgen
