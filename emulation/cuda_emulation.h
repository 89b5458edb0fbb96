// A CPU emulator of the CUDA features the kernel templates use, so the real template source runs
// on a host without a GPU: every thread of a CTA is a fiber; __syncthreads, warp shuffles, ldmatrix
// and mma.sync are collective operations implemented from their PTX definitions (independently of
// templates/layout.cuh); cp.async copies land in shared memory only when a cp.async.wait_group
// retires their group. The sm_90a primitives (mbarriers with transaction counts, TMA tiled loads
// from a tensor map, wgmma from shared-memory matrix descriptors, fence.proxy.async, setmaxnreg)
// are declared in hopper_emulation.h, which says what each does and checks; their run time is
// compiled in when CPGEN_EMULATION_HOPPER is defined (the test suite and the emulated backend's
// host compiles do). Include this before
// any template header, in a translation unit of its own: it defines __CUDACC__ and the CUDA
// keywords.
//
// One emulator serves two users: the test suite compiles cuda_emulation.cpp into its binary and
// runs template instantiations directly; the emulated backend (runtime/jit/host_jit.h) embeds every
// file of emulation/ in the library and compiles each generated kernel with them into a
// self-contained shared object. They include only standard headers and each other, so that
// compile needs nothing but a C++ compiler.
//
// Threads: the state of the CTA being run (and its shared memory) is thread_local, so several
// host threads may each run launches at once (the ranks of a ring on threads); one launch runs on
// the thread that called launch().
#pragma once

#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include <functional>
#include <string>

#define __CUDACC__ 1
#define __CUDA_ARCH__ 900
#define CPGEN_EMULATION 1
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
// Shared memory is per CTA; CTAs of one host thread run one after another, so one buffer per host
// thread serves them all. GNU __thread, not thread_local: it never has a dynamic initializer, so
// the kernel's block-scope `extern __shared__` declaration makes the compiler call no TLS init
// wrapper (an undefined weak one, assumed present under -fvisibility=hidden: a call to address 0).
#define __shared__ __thread
#define __align__(n)
// One to three arguments (max threads, min blocks per SM, max cluster size), as CUDA allows.
#define __launch_bounds__(...)
#define __grid_constant__

namespace cpgen::emulation {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
const Dim3& thread_idx();
const Dim3& block_idx();
const Dim3& grid_dim();
const Dim3& block_dim();  // (threads, 1, 1)

void syncthreads();  // barrier.sync 0 with every thread of the CTA
void syncwarp();
// PTX barrier{.cta}.sync / barrier{.cta}.arrive (bar.sync, bar.arrive): barrier `id` (0 to 15) of
// the CTA, `count` threads taking part (a multiple of 32 up to the CTA's threads; 0: all of them,
// which sync allows and arrive does not). sync counts this thread and waits until the phase's
// count of threads have arrived; arrive counts it and goes on. A completed phase releases its
// waiters and leaves the barrier ready for the next one. Findings: an id or count outside those
// ranges, a count other than the one the phase began with, a phase completed by part of a warp
// (the hardware counts whole warps), lanes of one warp arriving in one phase from different
// barrier instructions (the .aligned form every lane of a warp must execute together; known when
// the calls carry their source line, as __syncthreads and the templates' wrappers do), and a CTA
// that ends with arrivals no phase completed. For
// the sanitizer's race checks every arrival releases and every sync acquires the phase
// (happens_before.h): a phase orders shared memory between the threads it counted, from those
// that arrived or synced to those that synced.
void barrier_sync(int id, int count);
void barrier_arrive(int id, int count);
uint32_t shfl_xor(uint32_t value, int lane_mask);
bool any(bool predicate);

uint32_t shared_offset(const void* p);
// A plain load or store of `bytes` at shared offset `offset` that the kernel makes through the
// templates' wrappers (templates/shared_access.cuh): the sanitizer checks it like the emulator's
// own accesses (in the launch's dynamic shared memory; a load of bytes never written in the CTA
// that still hold the poison; a race with another thread's access). Returns whether the access
// lies in bounds and at a multiple of `alignment` (the type's, which sets the width of the GPU's
// access); the wrapper skips it otherwise (reported).
bool shared_load(uint32_t offset, int bytes, int alignment);
bool shared_store(uint32_t offset, int bytes, int alignment);
// A plain load or store of `bytes` at global address `p` that the kernel makes through the
// templates' wrappers (templates/global_access.cuh): at a multiple of `alignment` (the PTX ISA's
// natural alignment of the access; compute-sanitizer's "misaligned address") and, when the launch
// has buffers (set_global_buffers), inside one of them. Returns whether both hold; the wrapper
// skips the access otherwise (reported). A load from a poisoned buffer (GlobalBuffer) is also
// checked for words nothing wrote (reported; the load still happens). `store` says which it is.
bool global_access(const void* p, int bytes, int alignment, bool store);
void ldmatrix_x4(uint32_t (&r)[4], uint32_t shared_address, bool trans);
void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16);
uint32_t pack_16x2(float lo, float hi, bool bf16);
void cp_async_16(uint32_t shared_dst, const void* global_src, bool valid);
void cp_async_commit();
void cp_async_wait(int pending);
// PTX red.global.add.f32 (and atom.add.f32): *address = *address + value as one indivisible
// read-modify-write, the sum rounded to nearest even, subnormal inputs and results flushed to zero
// of the same sign (the ISA's definition of the .f32 add of red/atom, independent of .ftz flags).
// The fibers of a launch never run in parallel, so any interleaving of reductions on one word is
// some serial order of whole reductions, which is exactly what the ISA promises and nothing more.
// (Launches on different host threads must not reduce into the same memory.)
void red_add_f32(float* address, float value);
// PTX red.global.add.v2.f32 (sm_90): address[0] += x and address[1] += y with the .f32 add above,
// each element its own indivisible read-modify-write (the ISA makes the vector forms atomic per
// element only, so another reduction may land between the two); the address is aligned to the
// vector's 8 bytes and both words lie in global memory.
void red_add_v2_f32(float* address, float x, float y);
// PTX atom.global.add.u32: *address = *address + value (modulo 2^32) as one indivisible
// read-modify-write, returning the old value; the address 4-byte aligned, in one of the launch's
// buffers. Fibers never run in parallel, so each call is a whole atom in some serial order.
uint32_t atom_add_u32(uint32_t* address, uint32_t value);
// PTX red.global.min.u64: *address = min(*address, value), the two compared as unsigned 64-bit
// integers, as one indivisible read-modify-write; the address 8-byte aligned, in one of the
// launch's buffers. As above, each call is a whole reduction in some serial order.
void red_min_u64(uint64_t* address, uint64_t value);

// The sanitizer. Launches check what the emulator performs for the kernel: cp.async (source in
// one of the launch's global buffers, destination in its dynamic shared memory), red.add (target
// in a buffer), ldmatrix (rows in shared memory, written in this CTA, not racing a write), each
// address naturally aligned to its access (cp.async 16 bytes both sides, ldmatrix rows 16, red.add
// 4, its v2 form 8, plain shared accesses their type's alignment), the
// plain shared loads and stores of the templates' wrappers (shared_load, shared_store), and
// after each CTA that no plain store went past the dynamic shared size (a guard region). Plain
// global loads and stores of kernel code are caught only when they touch an inaccessible page:
// the emulated device puts a guard page right after (and before) each buffer it allocates, and
// the fault comes back here through recover_from_fault. Not caught: a plain access that lands
// inside another buffer, or in memory the emulated device did not allocate; plain shared
// accesses that bypass the wrappers are seen only as shared_shadow.h says. A finding fails the launch with the thread,
// block, address and, for operations the templates' wrappers issue, the kernel source line (a
// fault of a plain access has none); the first is reported, the rest counted.
struct GlobalBuffer {
  const void* data;
  size_t bytes;
  // Optional (tests): one counter per 16-byte chunk of the buffer, ceil(bytes / 16) of them, that
  // every asynchronous copy reading the chunk increments: a 16-byte cp.async (its source is
  // 16-byte aligned, so it reads exactly one chunk) and each box row of a TMA load (every chunk
  // its in-bounds bytes touch, once per row; out-of-bounds elements read nothing). Plain loads
  // are not counted: only the copies go through here.
  uint32_t* async_reads = nullptr;
  // Whether the buffer was filled with all-ones bytes when it was allocated (the emulated device
  // fills every allocation so, runtime/backend/emulated_device.h): then a read through the
  // emulator (a wrapped load, a cp.async or TMA source, red.add's old value) of an aligned word
  // that is all ones reads memory nothing wrote, compute-sanitizer initcheck's "uninitialized
  // global memory read", and is reported. No value the kernels or the host store is such a word:
  // positions and key intervals are non-negative, and the ones and NaNs that arithmetic makes
  // differ from it (float_to_16 gives 0x7fff; x86 and the GPU make 0xffc00000 and 0x7fffffff).
  // A word copied from another such word (a transfer of memory nothing wrote) still counts.
  bool poisoned = false;
};
// The global buffers of the following launches on this host thread; none (the default): global
// addresses are not checked.
void set_global_buffers(const GlobalBuffer* buffers, int count);

// Called by a SIGSEGV handler on the faulting host thread (runtime/backend/emulated_fault.h
// installs one): when that thread is running a launch, records the address and the thread and
// jumps back into launch(), which abandons the grid and fails with a report naming the thread,
// the block, the address and the buffer it lies next to; never returns then. Otherwise (no launch
// running on this thread) returns false and the caller treats the fault as it normally would.
// Async-signal-safe: it only reads and writes this thread's variables before the jump.
bool recover_from_fault(const void* address);

// Records the kernel source line of the calling thread's next emulated operation, which the
// sanitizer names in a finding ("... at cpgen/step_fwd.cuh:123"). The templates' wrappers pass
// their caller's line (CPGEN_SITE in templates/platform.cuh); calls without one keep the last.
void at_site(const char* file, int line);

// Runs body() as every thread of every CTA of the grid (CTAs one after another, threads as
// fibers), with `shared_bytes` of dynamic shared memory poisoned (0xFF) at the start of each CTA.
// Returns an empty string, or what went wrong: a deadlock (threads waiting on different barriers)
// or the sanitizer's findings.
std::string launch(unsigned grid_x, unsigned grid_y, unsigned threads, int shared_bytes,
                   const std::function<void()>& body);
// The same over a three-dimensional grid (grid.z > 1: (batch, kv head) pairs folded over y and z).
std::string launch(unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned threads,
                   int shared_bytes, const std::function<void()>& body);

// The .approx instructions the templates issue. The PTX ISA does not define their results, only
// how far from the true value they may be: ex2.approx.ftz.f32 within 2 ulp of the correctly
// rounded 2^x (subnormal inputs read as zero, subnormal results written as +0; -Inf gives +0,
// +-0 give 1, +Inf gives +Inf, NaN gives NaN), rcp.approx.ftz.f32 within 1 ulp of the correctly
// rounded 1/x (subnormal inputs and results flushed to zero of the same sign; +-0 give +-Inf,
// +-Inf give +-0, NaN gives NaN). A GPU returns one value of that set; the emulator lets a
// launch pick which side of it (set_approximation, this host thread's launches from now on), so
// a kernel is checked against the bound the ISA promises, not against one library's rounding:
//   kCorrectlyRounded  the correctly rounded value (the default)
//   kHigh, kLow        every result at the top (bottom) of its bound in magnitude: a systematic
//                      bias, the case that accumulates in sums
//   kMixed             top or bottom by a hash of the input's bits: deterministic, uncorrelated
// The tables' exact results stay exact in every mode.
enum class Approximation : int { kCorrectlyRounded = 0, kHigh = 1, kLow = 2, kMixed = 3 };
void set_approximation(Approximation mode);
Approximation approximation();
float ex2_approx_ftz_f32(float x);
float rcp_approx_ftz_f32(float x);

// PTX cvt.rn.bf16.f32 / cvt.rn.f16.f32: round to nearest even, overflow to infinity, fp16
// subnormals kept, NaN to the canonical 0x7fff. And the exact widening back to f32.
uint16_t float_to_16(float value, bool bf16);
float float_from_16(uint16_t bits, bool bf16);

}  // namespace cpgen::emulation

namespace cpgen::device {
extern __thread unsigned char shared_storage[];  // the kernel's extern __shared__ array
}

#define threadIdx (::cpgen::emulation::thread_idx())
#define blockIdx (::cpgen::emulation::block_idx())
#define gridDim (::cpgen::emulation::grid_dim())
#define blockDim (::cpgen::emulation::block_dim())
// The caller's line goes with the barrier, so that the lanes of a warp can be checked to reach
// the same one (barrier.sync.aligned) and a finding names it.
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::cpgen::emulation::at_site(file, line);
  ::cpgen::emulation::syncthreads();
}
inline void __syncwarp(unsigned = 0xffffffffu) { ::cpgen::emulation::syncwarp(); }
inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}
inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  uint32_t u;
  memcpy(&u, &v, 4);
  u = ::cpgen::emulation::shfl_xor(u, lane_mask);
  memcpy(&v, &u, 4);
  return v;
}
inline int __any_sync(unsigned, bool predicate) { return ::cpgen::emulation::any(predicate); }
inline int min(int a, int b) { return a < b ? a : b; }

// mbarrier, TMA, wgmma, fence.proxy.async, setmaxnreg (sm_90a).
#include "hopper_emulation.h"
