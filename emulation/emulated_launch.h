// The C entry point of an emulated kernel's shared object (runtime/jit/host_jit.h builds it, the
// emulated backend dlopen()s it). Plain C types only: the object carries its own copy of the
// emulator, so nothing but this struct crosses the boundary, and a library built by another
// compiler (or another version of cpgen) can still call it, or see that it must not.
#pragma once

#define CPGEN_EMULATED_ABI 6
#define CPGEN_EMULATED_ENTRY "cpgen_emulated_launch"
#define CPGEN_EMULATED_FAULT_ENTRY "cpgen_emulated_fault"

#include <stddef.h>

extern "C" {

// A global buffer the launch may touch; the sanitizer reports cp.async reads and red.add writes
// outside every one of them, and names the nearest one when a plain access faults. With
// read_counts, the cp.async and TMA reads of each 16-byte chunk are counted there (GlobalBuffer).
// With poisoned, reads of words that still hold the allocation's fill are reported (GlobalBuffer).
struct CpgenEmulatedBuffer {
  const void* data;
  size_t bytes;
  unsigned* read_counts;  // null, or one async-copy read counter per 16-byte chunk (tests)
  int poisoned;           // 1: filled with all-ones bytes when allocated (the emulated device's)
};

// Which value of the PTX ISA's error bound the launch's .approx instructions return
// (emulation/cuda_emulation.h, "The .approx instructions"; the same numbers as its Approximation).
enum CpgenEmulatedApproximation {
  CPGEN_APPROX_CORRECTLY_ROUNDED = 0,
  CPGEN_APPROX_HIGH = 1,
  CPGEN_APPROX_LOW = 2,
  CPGEN_APPROX_MIXED = 3,
};

struct CpgenEmulatedLaunch {
  int abi_version;  // CPGEN_EMULATED_ABI of the caller; the object refuses another
  unsigned grid_x, grid_y, grid_z;
  unsigned threads;    // per block, whole warps
  int shared_bytes;    // dynamic shared memory of the launch
  const void* params;  // the kernel's params struct (templates/params*.cuh) in host memory
  const struct CpgenEmulatedBuffer* buffers;  // none (count 0): global addresses are not checked
  int buffer_count;
  int approximation;   // a CpgenEmulatedApproximation
  char error[512];     // on failure: what went wrong, NUL-terminated
};

// Runs the whole grid on the calling thread before returning: 0 on success, else nonzero with
// `error` filled.
typedef int (*CpgenEmulatedEntry)(struct CpgenEmulatedLaunch* launch);

// Called from a SIGSEGV handler on the faulting thread (runtime/backend/emulated_fault.h): when
// that thread is inside this object's launch, jumps back into it (the launch then fails with the
// report) and never returns; otherwise returns 0. The emulator's recover_from_fault.
typedef int (*CpgenEmulatedFault)(void* address);
}
