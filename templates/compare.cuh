// The tuner's check of a candidate's results against the reference config's, on the GPU: every
// element of the forward's out and lse, or of the backward's dq, dk and dv, and the first index
// that disagrees in each tensor, kept by an atomic minimum. The host then reads a word per tensor
// where it downloaded the results (hundreds of MB at 32K) and compared them on the CPU
// (tuner/gpu_compare.h). The predicates are __host__ __device__, so the CPU tests check them
// against the host's own decoding and tolerances; the kernels run under the CPU emulator too.
#pragma once

#include "cpgen/global_access.cuh"
#include "cpgen/platform.cuh"

namespace cpgen {

struct CompareParams {
  const unsigned short* got;   // the candidate's out, n 16-bit elements
  const unsigned short* want;  // the reference config's
  long long n;
  float tolerance;             // |got - want| at most this
  int bf16;                    // 1: bf16, 0: fp16
  const float* got_lse;        // n_lse rows
  const float* want_lse;
  long long n_lse;
  float lse_absolute, lse_relative;  // |got - want| at most absolute + relative |want|
  unsigned long long* first;   // [0] out, [1] lse: n and n_lse before the launch, the first
                               // disagreeing index after it (unchanged where all agree)
};

// One fp32 gradient (dq, dk or dv) of `rows` rows of head_dim, against the reference config's.
struct GradientCompareParams {
  const float* got;
  const float* want;
  long long rows;
  int head_dim;
  float relative;              // |got - want| at most relative (|want| + rms of want's row)
  float want_scale;            // want stands for want_scale times its elements (1; 2 for the sum
                               // of two launches, exact in fp32), rms included
  unsigned long long* first;   // rows * head_dim before the launch, the first disagreeing flat
                               // index after it (unchanged where all agree)
};

namespace device {

CPGEN_HOST_DEVICE float float_from_bits(unsigned bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  return __builtin_bit_cast(float, bits);
#endif
}

// A 16-bit element's value, exactly: bf16 is the upper half of an fp32; fp16's sign, exponent and
// fraction move to fp32's places (exponent rebased by 127 - 15), its subnormals are the fraction
// times 2^-24, and its infinities and NaNs keep their fraction.
CPGEN_HOST_DEVICE float value_of_16(unsigned short bits, bool bf16) {
  if (bf16) return float_from_bits(static_cast<unsigned>(bits) << 16);
  const unsigned sign = static_cast<unsigned>(bits >> 15) << 31;
  const unsigned exponent = (bits >> 10) & 31u, fraction = bits & 1023u;
  if (exponent == 31) return float_from_bits(sign | 0x7f800000u | (fraction << 13));
  if (exponent == 0) {
    const float magnitude = static_cast<float>(fraction) * 5.9604644775390625e-8f;  // 2^-24
    return sign ? -magnitude : magnitude;
  }
  return float_from_bits(sign | ((exponent + 112u) << 23) | (fraction << 13));
}

// Written so that a NaN on either side (an element the kernel never wrote keeps its poison)
// disagrees.
CPGEN_HOST_DEVICE bool outputs_agree(unsigned short got, unsigned short want, float tolerance, bool bf16) {
  const float d = value_of_16(got, bf16) - value_of_16(want, bf16);
  return d <= tolerance && -d <= tolerance;
}

// A row that sees no key of the step (a window or documents) has lse -inf in every config:
// equal values agree even where their difference is a NaN, and an infinite want (whose relative
// bound is infinite) agrees with nothing else. A NaN never equals anything.
CPGEN_HOST_DEVICE bool lses_agree(float got, float want, float absolute, float relative) {
  if (got == want) return true;
  if (!(want - want == 0.0f)) return false;  // want is infinite (or a NaN)
  const float d = got - want;
  const float bound = absolute + relative * (want < 0 ? -want : want);
  return d <= bound && -d <= bound;
}

// Two correct configs differ only in summation order, by a small part of the terms' size, for
// which the row's rms stands (tuner/step_inputs_bwd.h gradient_agreement_tolerance); a NaN on
// either side disagrees.
CPGEN_HOST_DEVICE bool gradients_agree(float got, float want, float row_rms, float relative) {
  const float d = got - want;
  const float bound = relative * ((want < 0 ? -want : want) + row_rms);
  return d <= bound && -d <= bound;
}

#if defined(__CUDACC__)

// *address = min(*address, value) as unsigned 64-bit integers, atomically with respect to every
// other atomic on the word (red.global.min.u64; address 8-byte aligned). Here rather than in
// atomic.cuh: a kernel's code hash covers the templates it includes, and no step kernel needs it.
CPGEN_DEVICE void red_min_u64(unsigned long long* address, unsigned long long value CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::red_min_u64(reinterpret_cast<uint64_t*>(address), static_cast<uint64_t>(value));
#else
  asm volatile("red.global.min.u64 [%0], %1;\n" ::"l"(address), "l"(value) : "memory");
#endif
}

// Each thread walks its indices upward and stops at its first disagreement, so the minimum over
// the threads is the first disagreeing index of all.
CPGEN_DEVICE void compare_outputs(const CompareParams& p) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long start = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (long long i = start; i < p.n; i += stride) {
    if (!outputs_agree(load_global(p.got + i), load_global(p.want + i), p.tolerance, p.bf16 != 0)) {
      red_min_u64(&p.first[0], static_cast<unsigned long long>(i));
      break;
    }
  }
  for (long long i = start; i < p.n_lse; i += stride) {
    if (!lses_agree(load_global(p.got_lse + i), load_global(p.want_lse + i), p.lse_absolute, p.lse_relative)) {
      red_min_u64(&p.first[1], static_cast<unsigned long long>(i));
      break;
    }
  }
}

// A warp per row: each lane takes elements lane, lane + 32, ... of it, the warp sums the squares
// of the reference row for its rms, and each lane checks its elements in order. A warp walks its
// rows upward and stops after the first row where any lane disagrees, so the minimum over all
// lanes is the first disagreeing element of all. Every lane of a warp runs the same rows, so the
// shuffles and the vote have the whole warp. Launched with whole warps.
CPGEN_DEVICE void compare_gradients(const GradientCompareParams& p) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const long long warps = static_cast<long long>(gridDim.x) * (blockDim.x / 32);
  const long long first_row = static_cast<long long>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  for (long long row = first_row; row < p.rows; row += warps) {
    const float* got = p.got + row * p.head_dim;
    const float* want = p.want + row * p.head_dim;
    float squares = 0.0f;
    for (int d = lane; d < p.head_dim; d += 32) {
      const float x = p.want_scale * load_global(want + d);
      squares += x * x;
    }
    for (int offset = 16; offset >= 1; offset /= 2) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    const float rms = sqrtf(squares / static_cast<float>(p.head_dim));
    bool bad = false;
    for (int d = lane; d < p.head_dim; d += 32) {
      if (!gradients_agree(load_global(got + d), p.want_scale * load_global(want + d), rms, p.relative)) {
        red_min_u64(p.first, static_cast<unsigned long long>(row * p.head_dim + d));
        bad = true;
        break;
      }
    }
    if (__any_sync(0xffffffffu, bad)) break;
  }
}

#endif  // __CUDACC__

}  // namespace device
}  // namespace cpgen
