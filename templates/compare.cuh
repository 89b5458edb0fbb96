// The tuner's check of a candidate's output against the reference config's, on the GPU: every
// element of out and lse, and the first index that disagrees in each, kept by an atomic minimum.
// The host then reads two words where it downloaded the output (hundreds of MB at 32K) and
// compared it on the CPU (tuner/gpu_compare.h). The predicates are __host__ __device__, so the CPU
// tests check them against the host's own decoding of the 16-bit types.
#pragma once

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

CPGEN_HOST_DEVICE bool lses_agree(float got, float want, float absolute, float relative) {
  const float d = got - want;
  const float bound = absolute + relative * (want < 0 ? -want : want);
  return d <= bound && -d <= bound;
}

#if defined(__CUDACC__)

// *address = min(*address, value), atomically.
CPGEN_DEVICE void red_min_u64(unsigned long long* address, unsigned long long value) {
  asm volatile("red.global.min.u64 [%0], %1;\n" ::"l"(address), "l"(value) : "memory");
}

// Each thread walks its indices upward and stops at its first disagreement, so the minimum over
// the threads is the first disagreeing index of all.
CPGEN_DEVICE void compare_outputs(const CompareParams& p) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long start = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (long long i = start; i < p.n; i += stride) {
    if (!outputs_agree(p.got[i], p.want[i], p.tolerance, p.bf16 != 0)) {
      red_min_u64(&p.first[0], static_cast<unsigned long long>(i));
      break;
    }
  }
  for (long long i = start; i < p.n_lse; i += stride) {
    if (!lses_agree(p.got_lse[i], p.want_lse[i], p.lse_absolute, p.lse_relative)) {
      red_min_u64(&p.first[1], static_cast<unsigned long long>(i));
      break;
    }
  }
}

#endif  // __CUDACC__

}  // namespace device
}  // namespace cpgen
