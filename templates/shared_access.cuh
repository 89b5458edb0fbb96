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

}  // namespace device
}  // namespace cpgen

#endif  // __CUDACC__
