// Plain loads and stores of shared memory that the emulator's sanitizer sees. On the GPU each is
// the ordinary access it wraps (the same code as writing *p); under CPGEN_EMULATION the emulator
// first checks it (emulation/cuda_emulation.h, shared_load / shared_store): in the dynamic shared
// memory, at a multiple of the type's alignment (the width the GPU's access takes from it), not a
// read of bytes never written in the CTA, not racing another thread's access, with the kernel line
// that made it. Kernels use them for every shared access that is not a cp.async,
// ldmatrix, TMA or wgmma operand (those the emulator performs itself).
#pragma once

#include "cpgen/platform.cuh"

#if defined(__CUDACC__)

namespace cpgen {
namespace device {

template <typename V>
CPGEN_DEVICE V load_shared(const V* p CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  if (!emulation::shared_load(emulation::shared_offset(p), static_cast<int>(sizeof(V)), static_cast<int>(alignof(V))))
    return V{};
#endif
  return *p;
}

template <typename V>
CPGEN_DEVICE void store_shared(V* p, V value CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  if (!emulation::shared_store(emulation::shared_offset(p), static_cast<int>(sizeof(V)), static_cast<int>(alignof(V))))
    return;
#endif
  *p = value;
}

// The same for one 32-bit word at a shared-window address (what mbarriers and TMA take), where a
// kernel keeps no generic pointer: one register less than a pointer for a thread that has few.
CPGEN_DEVICE unsigned load_shared_u32(unsigned address CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  if (!emulation::shared_load(address, 4, 4)) return 0;
  unsigned v;
  memcpy(&v, shared_storage + address, 4);
  return v;
#else
  unsigned v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(address) : "memory");
  return v;
#endif
}

CPGEN_DEVICE void store_shared_u32(unsigned address, unsigned value CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  if (!emulation::shared_store(address, 4, 4)) return;
  memcpy(shared_storage + address, &value, 4);
#else
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
#endif
}

}  // namespace device
}  // namespace cpgen

#endif  // __CUDACC__
