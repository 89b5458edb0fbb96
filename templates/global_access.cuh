// Plain loads and stores of global memory that the emulator's sanitizer sees. On the GPU each is
// the ordinary access it wraps (the same code as writing *p); under CPGEN_EMULATION the emulator
// first checks it (emulation/cuda_emulation.h, global_access): at a multiple of the type's
// alignment, which sets the width of the GPU's access (an 8-byte pair of floats is one 64-bit
// load or store, and faults off an 8-byte boundary: compute-sanitizer's "misaligned address"),
// and inside one of the launch's buffers when it has them, with the kernel line that made it.
// The host CPU would perform either access without complaint, so a plain pointer access is
// checked only by the guard pages around the emulated device's allocations. The step kernels use
// these for their global accesses outside TMA, cp.async and the reductions: the fp32 state and
// gradient accumulators (pairs of floats, where alignment matters, and single rows), the LSE and
// delta, the packed outputs and gradients, and the rows' positions and key intervals; the
// sanitizer then names the line and the buffer an access missed. The key-position and interval
// searches of mask.cuh read their tables through load_global too (ArrayAt).
#pragma once

#include "cpgen/platform.cuh"

#if defined(__CUDACC__)

namespace cpgen {
namespace device {

template <typename V>
CPGEN_DEVICE V load_global(const V* p CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  if (!emulation::global_access(p, static_cast<int>(sizeof(V)), static_cast<int>(alignof(V)), false)) return V{};
#endif
  return *p;
}

template <typename V>
CPGEN_DEVICE void store_global(V* p, V value CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  if (!emulation::global_access(p, static_cast<int>(sizeof(V)), static_cast<int>(alignof(V)), true)) return;
#endif
  *p = value;
}

}  // namespace device
}  // namespace cpgen

#endif  // __CUDACC__
