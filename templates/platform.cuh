// What the templates need from the compiler, and nothing from any library: NVRTC compiles them
// with no standard or CUDA toolkit header, and g++ compiles the __host__ __device__ helpers for
// the CPU tests.
#pragma once

#if defined(__CUDACC__)
#define CPGEN_HOST_DEVICE __host__ __device__ __forceinline__
#define CPGEN_DEVICE __device__ __forceinline__
#else
#define CPGEN_HOST_DEVICE inline
#endif

namespace cpgen {
namespace device {

// +inf without <math.h>: the device reinterprets the IEEE bit pattern, the host uses the builtin.
CPGEN_HOST_DEVICE float positive_infinity() {
#if defined(__CUDA_ARCH__)
  return __int_as_float(0x7f800000);
#else
  return __builtin_huge_valf();
#endif
}

CPGEN_HOST_DEVICE float max_float(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fmaxf(a, b);
#else
  return a > b ? a : b;
#endif
}

// 2^x as the PTX ISA's ex2.approx.ftz.f32: relative error at most 2^-22, a subnormal input read
// as zero and a subnormal result written as +0; exp2(-inf) = +0 exactly, which the softmax relies
// on. exp2f compiles to ex2.approx.f32 instead, whose subnormal handling ptxas builds around each
// MUFU.EX2 from a compare and two predicated multiplies (76 of each in the forward default's
// SASS, most of them in the key-tile loop). The softmax loses nothing to the flush: a term below
// 2^-126 sits beside the row maximum's own term of 1. The host applies the same flushes around
// the correctly rounded exp2; the emulator the instruction's definition (its result anywhere in
// the ISA's bound, as a launch asks: emulation/cuda_emulation.h, "The .approx instructions").
CPGEN_HOST_DEVICE float exp2_approx(float x) {
#if defined(CPGEN_EMULATION)
  return ::cpgen::emulation::ex2_approx_ftz_f32(x);
#elif defined(__CUDA_ARCH__)
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  constexpr float kSmallestNormal = 1.17549435e-38f;  // 2^-126
  if (x > -kSmallestNormal && x < kSmallestNormal) x = 0.0f;
  const float r = __builtin_exp2f(x);
  return r < kSmallestNormal ? 0.0f : r;
#endif
}

CPGEN_HOST_DEVICE float log2_approx(float x) {
#if defined(__CUDA_ARCH__)
  return log2f(x);
#else
  return __builtin_log2f(x);
#endif
}

// 1/x as the PTX ISA's rcp.approx.ftz.f32: within 1 ulp of the correctly rounded reciprocal,
// subnormal inputs and results flushed to zero of the same sign, 1/+-0 = +-Inf, 1/+-Inf = +-0.
// One MUFU.RCP where `1.0f / x` compiles to an IEEE division (a reciprocal, its refinement and a
// slow-path branch). The emulator as exp2_approx's; the host divides.
CPGEN_HOST_DEVICE float rcp_approx(float x) {
#if defined(CPGEN_EMULATION)
  return ::cpgen::emulation::rcp_approx_ftz_f32(x);
#elif defined(__CUDA_ARCH__)
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return 1.0f / x;
#endif
}

}  // namespace device
}  // namespace cpgen

#if defined(__CUDACC__)
// Source lines for the emulator's sanitizer: under the emulator, a wrapper declared with
// CPGEN_SITE takes its caller's file and line as defaulted parameters and hands them over with
// CPGEN_AT_SITE() before the emulated operation, so a finding names the kernel line that issued
// it (CPGEN_SITE_ONLY: the same for a wrapper with no other parameter; CPGEN_PASS_SITE, after
// the last argument, hands a wrapper's own site on to another). On the GPU all expand to nothing.
#if defined(CPGEN_EMULATION)
#define CPGEN_SITE_ONLY const char *cpgen_site_file = __builtin_FILE(), int cpgen_site_line = __builtin_LINE()
#define CPGEN_SITE , CPGEN_SITE_ONLY
#define CPGEN_AT_SITE() ::cpgen::emulation::at_site(cpgen_site_file, cpgen_site_line)
#define CPGEN_PASS_SITE , cpgen_site_file, cpgen_site_line
#else
#define CPGEN_SITE_ONLY
#define CPGEN_SITE
#define CPGEN_AT_SITE()
#define CPGEN_PASS_SITE
#endif

namespace cpgen {
namespace device {

// Returns v unchanged, but the compiler can no longer see where it came from. Values derived
// from an opaque copy taken inside the tile loop are recomputed per tile instead of being hoisted
// out of the loop into registers that stay live across it (the step kernel is register-bound).
#if defined(CPGEN_EMULATION)
CPGEN_DEVICE int opaque(int v) { return v; }
#else
CPGEN_DEVICE int opaque(int v) {
  asm volatile("" : "+r"(v));
  return v;
}
#endif

}  // namespace device
}  // namespace cpgen
#endif  // __CUDACC__
