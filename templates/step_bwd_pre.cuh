// The backward's per-row kernels around the step kernel (params_bwd.cuh): the preprocessing,
// delta = rowsum(dO * O) in fp32 from the forward's output and the fp32 dQ accumulator cleared for
// the step kernels' atomic adds; and the final conversion of an fp32 accumulator (dQ, dK or dV)
// into the caller's gradient in the input dtype.
//
// delta is the softmax Jacobian's correction: dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik), and
// sum_k P_ik dP_ik = dO_i . (sum_k P_ik v_k) = dO_i . O_i, one dot product per row instead of a
// pass over every key. A row that saw no key has O = 0, so delta = 0.
//
// Grid: ceil(batch * q_heads * q_len / kWarps); one warp per row, each lane reading pairs of
// elements (4-byte loads, coalesced along the row). Launch requirements: out and dout rows 4-byte
// aligned, dq_acc 8-byte aligned; block = kWarps * 32 threads, no shared memory.
#pragma once

#include "cpgen/global_access.cuh"
#include "cpgen/mma.cuh"
#include "cpgen/params_bwd.cuh"
#include "cpgen/softmax.cuh"

namespace cpgen {
namespace device {

// Two 16-bit values of one 32-bit word as fp32 (lo from bits 0-15), exactly.
template <typename T>
CPGEN_DEVICE void unpack2(u32 packed, float& lo, float& hi);
template <>
CPGEN_DEVICE void unpack2<Bf16>(u32 packed, float& lo, float& hi) {
#if defined(CPGEN_EMULATION)
  lo = emulation::float_from_16(static_cast<unsigned short>(packed), true);
  hi = emulation::float_from_16(static_cast<unsigned short>(packed >> 16), true);
#else
  // bf16 is the upper half of an fp32.
  asm("mov.b32 %0, %1;\n" : "=f"(lo) : "r"(packed << 16));
  asm("mov.b32 %0, %1;\n" : "=f"(hi) : "r"(packed & 0xffff0000u));
#endif
}
template <>
CPGEN_DEVICE void unpack2<Fp16>(u32 packed, float& lo, float& hi) {
#if defined(CPGEN_EMULATION)
  lo = emulation::float_from_16(static_cast<unsigned short>(packed), false);
  hi = emulation::float_from_16(static_cast<unsigned short>(packed >> 16), false);
#else
  asm("{ .reg .f16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;\n}\n"
      : "=f"(lo), "=f"(hi)
      : "r"(packed));
#endif
}

template <typename T, int kHeadDim, int kWarps>
CPGEN_DEVICE void ring_bwd_pre(const RingBwdPreParams& params) {
  static_assert(kHeadDim % 2 == 0, "rows are read as pairs of elements");
  constexpr int kPairs = kHeadDim / 2;
  const int lane = threadIdx.x % 32;
  const long long row = static_cast<long long>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const long long rows = static_cast<long long>(params.batch) * params.q_heads * params.q_len;
  if (row >= rows) return;  // whole warps leave together: the shuffles below see full warps
  const int query = static_cast<int>(row % params.q_len);
  const long long head_row = row / params.q_len;
  const int head = static_cast<int>(head_row % params.q_heads);
  const int batch = static_cast<int>(head_row / params.q_heads);
  const u32* out_row = reinterpret_cast<const u32*>(
      static_cast<const char*>(params.out) +
      (batch * params.out_batch_stride + head * params.out_head_stride + query * params.out_row_stride) * 2);
  const u32* dout_row = reinterpret_cast<const u32*>(
      static_cast<const char*>(params.dout) +
      (batch * params.dout_batch_stride + head * params.dout_head_stride + query * params.dout_row_stride) * 2);
  float* dq_row = params.dq_acc + row * kHeadDim;

  float partial = 0.0f;
#pragma unroll
  for (int pair = lane; pair < kPairs; pair += 32) {
    float o_lo, o_hi, do_lo, do_hi;
    unpack2<T>(load_global(out_row + pair), o_lo, o_hi);
    unpack2<T>(load_global(dout_row + pair), do_lo, do_hi);
    partial = fmaf(do_lo, o_lo, partial);
    partial = fmaf(do_hi, o_hi, partial);
    store_global(dq_row + 2 * pair, 0.0f);
    store_global(dq_row + 2 * pair + 1, 0.0f);
  }
  // Butterfly sum over the warp: every lane ends with the row's total.
#pragma unroll
  for (int offset = 16; offset >= 1; offset /= 2) partial += __shfl_xor_sync(0xffffffffu, partial, offset);
  if (lane == 0) store_global(params.delta + row, partial);
}

// Rounding happens once, here: the accumulators stay fp32 over all N steps (and, for dK/dV, over
// the whole trip around the ring), so the gradient carries one rounding of the input dtype, as a
// single-device backward's would.
template <typename T, int kHeadDim, int kWarps>
CPGEN_DEVICE void ring_bwd_convert(const RingBwdConvertParams& params) {
  static_assert(kHeadDim % 2 == 0, "rows are written as pairs of elements");
  constexpr int kPairs = kHeadDim / 2;
  const int lane = threadIdx.x % 32;
  const long long row = static_cast<long long>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const long long rows = static_cast<long long>(params.batch) * params.heads * params.len;
  if (row >= rows) return;
  const int position = static_cast<int>(row % params.len);
  const long long head_row = row / params.len;
  const int head = static_cast<int>(head_row % params.heads);
  const int batch = static_cast<int>(head_row / params.heads);
  const float* acc_row = params.acc + row * kHeadDim;
  u32* grad_row = reinterpret_cast<u32*>(
      static_cast<char*>(params.grad) +
      (batch * params.grad_batch_stride + head * params.grad_head_stride + position * params.grad_row_stride) * 2);
#pragma unroll
  for (int pair = lane; pair < kPairs; pair += 32)
    store_global(grad_row + pair, pack2<T>(load_global(acc_row + 2 * pair), load_global(acc_row + 2 * pair + 1)));
}

}  // namespace device
}  // namespace cpgen
