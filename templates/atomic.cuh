// Global-memory float reduction for the backward's dQ: red.global.add.f32 (no return value, so
// the SM does not wait for it). The CPU emulator implements it from the PTX definition.
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

}  // namespace device
}  // namespace cpgen

#endif  // __CUDACC__
