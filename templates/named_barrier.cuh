// The CTA's hardware barriers by id (PTX barrier{.cta}, sm_70+), for ordering subsets of the
// CTA's warps without stopping the others: barrier 0 is __syncthreads', 1 to 15 are free. Under
// CPGEN_EMULATION the CPU emulator runs them (emulation/cuda_emulation.h, barrier_sync).
//
// Both take whole warps: every lane of a warp executes the call, and `threads` (a multiple of 32)
// counts all the threads that sync or arrive in one phase of the barrier.
#pragma once

#include "cpgen/platform.cuh"

#if defined(__CUDACC__)

namespace cpgen {
namespace device {

// Counts this warp's threads at barrier `id` and waits until `threads` have arrived.
CPGEN_DEVICE void named_barrier_sync(unsigned id, unsigned threads CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::barrier_sync(static_cast<int>(id), static_cast<int>(threads));
#else
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#endif
}

// Counts this warp's threads at barrier `id` and goes on.
CPGEN_DEVICE void named_barrier_arrive(unsigned id, unsigned threads CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::barrier_arrive(static_cast<int>(id), static_cast<int>(threads));
#else
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#endif
}

}  // namespace device
}  // namespace cpgen

#endif  // __CUDACC__
