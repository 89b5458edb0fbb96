#include "tests/runtime/backend/model_device.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cpgen/error.h"
#include "runtime/core/half_convert.h"

namespace cpgen::test {

DeviceAllocation ModelMemory::allocate(size_t bytes) {
  // 256-byte aligned like cuMemAlloc, so alignment checks see what a GPU would give.
  const size_t rounded = (bytes + 255) / 256 * 256;
  char* p = static_cast<char*>(std::aligned_alloc(256, rounded == 0 ? 256 : rounded));
  if (!p) throw Error(ErrorKind::kInternal, "ModelMemory: out of memory");
  // Fresh device memory holds whatever was there; here every byte is kPoisonByte, so a read of
  // memory nothing wrote shows (a NaN in every dtype) instead of passing as zeros.
  std::memset(p, kPoisonByte, rounded == 0 ? 256 : rounded);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_[p] = bytes;
  }
  auto release = [this](void* q) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_.erase(static_cast<const char*>(q));
    }
    std::free(q);
  };
  return DeviceAllocation(std::shared_ptr<void>(p, release), bytes);
}

bool ModelMemory::contains(const void* p, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const char* c = static_cast<const char*>(p);
  auto it = blocks_.upper_bound(c);
  if (it == blocks_.begin()) return false;
  --it;
  return c >= it->first && c + bytes <= it->first + it->second;
}

size_t first_unwritten_word(const void* p, size_t bytes) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i + 4 <= bytes; i += 4)
    if (c[i] == kPoisonByte && c[i + 1] == kPoisonByte && c[i + 2] == kPoisonByte && c[i + 3] == kPoisonByte) return i;
  return bytes;
}

void ModelDevice::require(const void* p, size_t bytes, const std::string& what) const {
  if (!memory_->contains(p, bytes))
    throw Error(ErrorKind::kInternal, "ModelDevice: " + what + " (" + std::to_string(bytes) +
                                          " bytes) is outside every allocation");
}

void ModelDevice::upload(void* dst, const void* host, size_t bytes) {
  require(dst, bytes, "upload destination");
  std::memcpy(dst, host, bytes);
}

void ModelDevice::copy(void* dst, const void* src, size_t bytes) {
  require(dst, bytes, "copy destination");
  require(src, bytes, "copy source");
  std::memcpy(dst, src, bytes);
  ++copies_;
}

void ModelDevice::zero(void* dst, size_t bytes) {
  require(dst, bytes, "zero destination");
  std::memset(dst, 0, bytes);
}

void ModelDevice::launch_forward(StepType, const RingFwdParams&) {
  throw Error(ErrorKind::kInternal, "ModelDevice models the backward kernels only");
}

double ModelDevice::load(const void* base, int64_t index) const {
  const uint16_t bits = static_cast<const uint16_t*>(base)[index];
  return dtype_ == Dtype::kBf16 ? bf16_to_float(bits) : fp16_to_float(bits);
}

// Extent in elements of a [batch, heads, rows, head_dim] tensor with these strides.
static int64_t extent(int64_t batch, int64_t heads, int64_t rows, int64_t bs, int64_t hs, int64_t rs, int hd) {
  return (batch - 1) * bs + (heads - 1) * hs + (rows - 1) * rs + hd;
}

void ModelDevice::launch_backward_pre(const RingBwdPreParams& p) {
  const int64_t rows = static_cast<int64_t>(p.batch) * p.q_heads * p.q_len;
  require(p.out, 2 * extent(p.batch, p.q_heads, p.q_len, p.out_batch_stride, p.out_head_stride, p.out_row_stride, head_dim_), "pre out");
  require(p.dout, 2 * extent(p.batch, p.q_heads, p.q_len, p.dout_batch_stride, p.dout_head_stride, p.dout_row_stride, head_dim_), "pre dout");
  require(p.delta, 4 * rows, "pre delta");
  require(p.dq_acc, 4 * rows * head_dim_, "pre dq_acc");
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.q_heads; ++h)
      for (int i = 0; i < p.q_len; ++i) {
        const int64_t row = (static_cast<int64_t>(b) * p.q_heads + h) * p.q_len + i;
        const int64_t o = b * p.out_batch_stride + h * p.out_head_stride + i * p.out_row_stride;
        const int64_t g = b * p.dout_batch_stride + h * p.dout_head_stride + i * p.dout_row_stride;
        double sum = 0;
        for (int d = 0; d < head_dim_; ++d) sum += load(p.out, o + d) * load(p.dout, g + d);
        p.delta[row] = static_cast<float>(sum);
        for (int d = 0; d < head_dim_; ++d) p.dq_acc[row * head_dim_ + d] = 0.0f;
      }
  launches_.push_back({"pre", StepType::kBwdFull, p, {}, {}});
}

void ModelDevice::launch_backward(StepType step, const RingBwdParams& p) {
  const int hd = head_dim_;
  const int group = p.q_heads / p.kv_heads;
  // lse, delta and dq_acc rows are state_len apart per head; the launch uses q_len of them.
  const int64_t pitch = p.state_len > 0 ? p.state_len : p.q_len;
  const int64_t q_rows = (static_cast<int64_t>(p.batch) * p.q_heads - 1) * pitch + p.q_len;
  const int64_t kv_elems = static_cast<int64_t>(p.batch) * p.kv_heads * p.kv_len * hd;
  require(p.q, 2 * extent(p.batch, p.q_heads, p.q_len, p.q_batch_stride, p.q_head_stride, p.q_row_stride, hd), "step q");
  require(p.k, 2 * extent(p.batch, p.kv_heads, p.kv_len, p.k_batch_stride, p.k_head_stride, p.k_row_stride, hd), "step k");
  require(p.v, 2 * extent(p.batch, p.kv_heads, p.kv_len, p.v_batch_stride, p.v_head_stride, p.v_row_stride, hd), "step v");
  require(p.dout, 2 * extent(p.batch, p.q_heads, p.q_len, p.dout_batch_stride, p.dout_head_stride, p.dout_row_stride, hd), "step dout");
  require(p.lse, 4 * q_rows, "step lse");
  require(p.delta, 4 * q_rows, "step delta");
  require(p.dq_acc, 4 * q_rows * hd, "step dq_acc");
  require(p.dk_acc, 4 * kv_elems, "step dk_acc");
  require(p.dv_acc, 4 * kv_elems, "step dv_acc");
  require(p.q_positions, 4 * static_cast<size_t>(p.q_len), "step q_positions");
  require(p.kv_positions, 4 * static_cast<size_t>(p.kv_len), "step kv_positions");
  if (key_intervals_) {
    require(p.q_key_first, 4 * static_cast<size_t>(p.q_len), "step q_key_first");
    require(p.q_key_last, 4 * static_cast<size_t>(p.q_len), "step q_key_last");
  }
  if (softcap_ && !(p.softcap > 0))
    throw Error(ErrorKind::kInternal, "ModelDevice: a softcap kernel launched with softcap " + std::to_string(p.softcap));

  // This step's contributions in float64, added once into the fp32 accumulators.
  std::vector<double> dq(std::max<int64_t>(q_rows, 0) * hd, 0.0), dk(kv_elems, 0.0), dv(kv_elems, 0.0);
  constexpr double kLog2e = 1.4426950408889634;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.q_heads; ++h) {
      const int kvh = h / group;
      for (int i = 0; i < p.q_len; ++i) {
        const int64_t row = (static_cast<int64_t>(b) * p.q_heads + h) * pitch + i;
        const float lse = p.lse[row];
        if (std::isinf(lse) && lse < 0) continue;  // the row saw no key: no gradient
        const int64_t qo = b * p.q_batch_stride + h * p.q_head_stride + i * p.q_row_stride;
        const int64_t go = b * p.dout_batch_stride + h * p.dout_head_stride + i * p.dout_row_stride;
        for (int j = 0; j < p.kv_len; ++j) {
          const int k_pos = p.kv_positions[j];
          if (key_intervals_ ? (k_pos < p.q_key_first[i] || k_pos > p.q_key_last[i])
                             : (causal_ && k_pos > p.q_positions[i]))
            continue;
          const int64_t ko = b * p.k_batch_stride + kvh * p.k_head_stride + j * p.k_row_stride;
          const int64_t vo = b * p.v_batch_stride + kvh * p.v_head_stride + j * p.v_row_stride;
          double qk = 0, dp = 0;
          for (int d = 0; d < hd; ++d) {
            qk += load(p.q, qo + d) * load(p.k, ko + d);
            dp += load(p.dout, go + d) * load(p.v, vo + d);
          }
          // P = exp(t - lse) with the logit t = scale q.k (the kernel's exp2 form), or with a
          // softcap c, t = c tanh(scale q.k / c), whose slope dt / d(scale q.k) = 1 - (t / c)^2
          // enters dS.
          double prob, slope = 1.0;
          if (softcap_) {
            const double capped = std::tanh(p.scale * qk / p.softcap);
            prob = std::exp(p.softcap * capped - static_cast<double>(lse));
            slope = 1.0 - capped * capped;
          } else {
            prob = std::exp2(qk * p.scale_log2 - static_cast<double>(lse) * kLog2e);
          }
          const double ds = prob * (dp - p.delta[row]) * slope;
          const int64_t kv_row = ((static_cast<int64_t>(b) * p.kv_heads + kvh) * p.kv_len + j) * hd;
          for (int d = 0; d < hd; ++d) {
            dq[row * hd + d] += p.scale * ds * load(p.k, ko + d);
            dk[kv_row + d] += p.scale * ds * load(p.q, qo + d);
            dv[kv_row + d] += prob * load(p.dout, go + d);
          }
        }
      }
    }
  for (int64_t e = 0; e < static_cast<int64_t>(dq.size()); ++e) p.dq_acc[e] = static_cast<float>(p.dq_acc[e] + dq[e]);
  for (int64_t e = 0; e < kv_elems; ++e) {
    p.dk_acc[e] = static_cast<float>((p.accumulate_dkv ? p.dk_acc[e] : 0.0) + dk[e]);
    p.dv_acc[e] = static_cast<float>((p.accumulate_dkv ? p.dv_acc[e] : 0.0) + dv[e]);
  }
  launches_.push_back({"step", step, {}, p, {}});
}

void ModelDevice::launch_backward_convert(const RingBwdConvertParams& p) {
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads * p.len;
  require(p.acc, 4 * rows * head_dim_, "convert acc");
  require(p.grad, 2 * extent(p.batch, p.heads, p.len, p.grad_batch_stride, p.grad_head_stride, p.grad_row_stride, head_dim_), "convert grad");
  uint16_t* grad = static_cast<uint16_t*>(p.grad);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.len; ++i) {
        const int64_t row = (static_cast<int64_t>(b) * p.heads + h) * p.len + i;
        const int64_t g = b * p.grad_batch_stride + h * p.grad_head_stride + i * p.grad_row_stride;
        for (int d = 0; d < head_dim_; ++d) {
          const float x = p.acc[row * head_dim_ + d];
          grad[g + d] = dtype_ == Dtype::kBf16 ? float_to_bf16(x) : float_to_fp16(x);
        }
      }
  launches_.push_back({"convert", StepType::kBwdFull, {}, {}, p});
}

}  // namespace cpgen::test
