// Global-memory atomics: the float reductions of the backward's dQ (red.global.add.f32 and, from
// sm_90, its two-element vector form; no return value, so the SM does not wait for them) and the
// unsigned add that returns the old value (atom.global.add.u32). The CPU emulator implements each
// from its PTX definition.
#pragma once

#include "cpgen/platform.cuh"

#if defined(__CUDACC__)

namespace cpgen {
namespace device {

// *address += value, atomically with respect to every other reduction on the same word.
CPGEN_DEVICE void red_add_f32(float* address, float value CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::red_add_f32(address, value);
#else
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(address), "f"(value) : "memory");
#endif
}

// address[0] += x and address[1] += y, each atomically on its own (the pair as a whole is not one
// indivisible access); address 8-byte aligned. From sm_90 one red.global.add.v2.f32: a warp whose
// lanes hold adjacent column pairs of an MMA accumulator fills each 32-byte sector it touches,
// where the scalar form touches the same sectors twice, half-used. Before sm_90, two scalar reds.
CPGEN_DEVICE void red_add_f32x2(float* address, float x, float y CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::red_add_v2_f32(address, x, y);
#elif __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(address), "f"(x), "f"(y) : "memory");
#else
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(address), "f"(x) : "memory");
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(address + 1), "f"(y) : "memory");
#endif
}

// *address += value, atomically with respect to every other atomic on the same word; returns the
// value it replaced (atom.global.add.u32; wraps modulo 2^32). A persistent kernel's CTAs take
// their next work item with it (step_fwd_wgmma.cuh).
CPGEN_DEVICE unsigned atomic_add_u32(unsigned* address, unsigned value CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  return emulation::atom_add_u32(address, value);
#else
  unsigned old;
  asm volatile("atom.global.add.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(address), "r"(value) : "memory");
  return old;
#endif
}

}  // namespace device
}  // namespace cpgen

#endif  // __CUDACC__
