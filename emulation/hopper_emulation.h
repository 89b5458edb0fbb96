// The Hopper (sm_90a) primitives of the emulator: mbarriers with transaction counts, TMA tiled
// loads, warpgroup MMA (wgmma) from shared-memory matrix descriptors, and the fences and register
// hints around them. Each is written from its PTX ISA definition; templates/hopper.cuh wraps them
// the way templates/mma.cuh wraps the sm_80 ones. Included by cuda_emulation.h; the run time is
// hopper_emulation.inc, part of cuda_emulation.cpp's translation unit (it uses the CTA's fibers).
//
// Addresses are 32-bit shared-window addresses (shared_offset()); mbarriers and TMA destinations
// must lie in the launch's dynamic shared memory.
//
// mbarrier (PTX "Parallel Synchronization and Communication Instructions: mbarrier"): a phase
// completes when its pending arrival count reaches zero and its transaction count is zero; then
// the phase number advances, the pending count goes back to the count given at init, and the
// transaction count restarts at zero. arrive returns a token naming the phase it arrived on.
// try_wait.parity(p) is true once the phase of parity p has completed, i.e. the current phase's
// parity is no longer p; a false answer yields to the other threads, so a wait on a phase that
// never completes ends the launch as a reported deadlock. inval ends the object: the location may
// then be initialized again (the ISA leaves an init over a valid mbarrier undefined). Findings:
// any operation on an address that was never initialized or was invalidated, an init over a
// valid mbarrier (naming its pending phase when it has arrivals or transactions under way), an
// arrive in a phase whose predecessor no wait has yet observed complete (the ISA asks for one
// successful test_wait/try_wait per phase before an arrive-on in the next), a TMA copy on a
// barrier whose init (a generic-proxy write) no fence.proxy.async orders before the copy, and
// a transaction-count underflow: more bytes completed than the phase
// expected, seen once the phase has no arrivals left that could still expect them (the ISA lets
// the count go negative until then), or a count outside the ISA's range of +-(2^20 - 1).
//
// TMA (cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes): reads
// the box at the coordinates (elements outside the tensor read as zero; in-bounds rows must lie
// in the launch's buffers, the cp.async rule), lays it out densely in shared memory (a swizzled
// map's box rows are exactly its span, tensor_map.h) with the map's swizzle applied to the
// absolute shared address (16-byte chunk bits 4.. XOR-ed with bits 7.. of the address: one, two
// or three bits for 32B, 64B, 128B), and performs complete_tx of the box's bytes on the mbarrier
// at once. The bytes land in shared memory when that barrier's phase completes, not before, as
// writes of the barrier itself (happens_before.h): an emulator-performed read (ldmatrix, wgmma)
// of them by a thread that neither observed the phase with a try_wait nor is ordered after a
// thread that did is a race, and so is a landing over bytes whose earlier accesses do not happen
// before the copy's issue (a stage released before its last read). Arrivals release into their
// phase; a try_wait that observes it acquires.
// Plain C++ reads of shared memory are invisible to the emulator (the templates' load_shared is
// not). Copies still waiting for their phase when the CTA ends are findings, and so are a
// destination that overlaps an initialized mbarrier and any write (a TMA or cp.async landing, a
// store_shared) of bytes that a wgmma not yet retired by its wait_group has read (the GPU may
// still be reading them: a stage released to the producer before the consumer's
// wgmma.wait_group), whatever synchronization came between.
//
// wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}: a collective of the 128 threads of a
// warpgroup (warps 4i..4i+3); N a multiple of 8 up to 256. D (64 x N, f32) is held N/2 registers
// per thread: warp w of the group holds rows 16w..16w+15; lane l, with g = l/4 and t = l%4, holds
// in d[4j + 0], d[4j + 1] the columns 8j + 2t, 8j + 2t + 1 of row 16w + g, and in d[4j + 2],
// d[4j + 3] the same columns of row 16w + g + 8. A from registers: four 32-bit registers of two
// elements each, a0 (row g, k 2t..2t+1), a1 (row g + 8, same k), a2 (row g, k 2t+8..2t+9),
// a3 (row g + 8, k 2t+8..), rows relative to 16w. A and B from shared memory through 64-bit matrix
// descriptors (wgmma_descriptor_* below, the ISA's "Matrix Descriptor Format") in the canonical
// layouts of the ISA's "Shared Memory Matrix Layout": K-major or (transpose bit set) MN-major,
// unswizzled or 32/64/128-byte swizzled. Operands are read when the instruction is issued; the
// ISA leaves any access of the accumulator registers, and of the A registers of the register
// form, undefined until the wgmma.wait_group that retires the operation. So from the issue to
// that wait the accumulator registers hold a signaling NaN (its arithmetic gives NaNs: a kernel
// that reads them early fails its numeric checks), and the result reaches them at the wait, after
// any earlier wgmma in flight on the same registers (the k-steps of one product chain as on the
// GPU). Findings: operands not uniform across the warpgroup, an mma with no wgmma.fence since
// the thread's start or its last wait_group, accumulator or A registers whose bits the thread
// changed after that fence (the ISA's fence goes between a register access and the wgmma that
// accesses the register; checked once a fence follows an earlier wgmma on the same registers, as
// in a kernel's loop from its second pass on, and keyed by their host addresses, so another
// variable the host compiler placed there and wrote after the fence counts too: the templates
// fence right before their wgmmas), a nonzero descriptor base offset (not modelled),
// operand bytes outside the dynamic shared memory or never written, accumulator registers
// written (they no longer hold the NaN's bits) or A registers changed before the retiring wait,
// accumulators that partly overlap those of an in-flight wgmma of another shape, and a thread
// that ends with operations not retired by a wait_group. (On a GPU, ptxas either inserts a wait
// before such an access, serializing the pipeline, or the access is silently wrong.)
//
// fence.proxy.async is counted (async_proxy_fence_count) and orders the proxies: a wgmma operand
// byte last written through the generic proxy (a shared store through the templates' wrappers, a
// cp.async landing) is a finding unless some fence.proxy.async happens after that write and
// before the read (TMA landings are async-proxy writes and need none). setmaxnreg has no effect
// on the emulated registers; its findings: a count outside 24 to 256 or not a multiple of 8, a
// .dec above or an .inc below the thread's previous setmaxnreg, and warps of one warpgroup that
// ran different setmaxnreg sequences (checked at the CTA's end). That the plan fits the registers
// ptxas allocated is checked after NVRTC (runtime/jit/jit.h, wgmma_register_plan_problem).
#pragma once

#include <stdint.h>

#include "tensor_map.h"

namespace cpgen::emulation {

void mbarrier_init(uint32_t barrier, uint32_t count);
void mbarrier_inval(uint32_t barrier);
uint64_t mbarrier_arrive(uint32_t barrier);
uint64_t mbarrier_arrive_expect_tx(uint32_t barrier, uint32_t bytes);
void mbarrier_complete_tx(uint32_t barrier, uint32_t bytes);
bool mbarrier_try_wait_parity(uint32_t barrier, uint32_t parity);
void mbarrier_wait_parity(uint32_t barrier, uint32_t parity);

// `tensor_map` points at the 128 bytes of a TensorMap; `coords` holds `rank` signed coordinates,
// innermost first.
void tma_load(uint32_t shared_dst, const void* tensor_map, const int32_t* coords, int rank, uint32_t barrier);

// The matrix descriptor (ISA: bits 0-13 start address, 16-29 leading dimension byte offset, 32-45
// stride dimension byte offset, each encoded as (x & 0x3FFFF) >> 4; 49-51 base offset; 62-63
// swizzle mode).
constexpr uint32_t kWgmmaSwizzleNone = 0;
constexpr uint32_t kWgmmaSwizzle128B = 1;
constexpr uint32_t kWgmmaSwizzle64B = 2;
constexpr uint32_t kWgmmaSwizzle32B = 3;
struct WgmmaDescriptor {
  uint32_t start = 0;  // bytes, 16-byte granular
  uint32_t leading_byte_offset = 0;
  uint32_t stride_byte_offset = 0;
  uint32_t base_offset = 0;
  uint32_t swizzle = kWgmmaSwizzleNone;
};
WgmmaDescriptor wgmma_descriptor_decode(uint64_t descriptor);

// d (n / 2 floats of this thread) = A * B (+ d when accumulate), A and B scaled by scale_a, scale_b
// (each 1 or -1), applied at the retiring wait_group.
void wgmma_mma_async_ss(float* d, int n, bool bf16, uint64_t desc_a, uint64_t desc_b, bool accumulate, int scale_a,
                        int scale_b, bool trans_a, bool trans_b);
void wgmma_mma_async_rs(float* d, int n, bool bf16, const uint32_t (&a)[4], uint64_t desc_b, bool accumulate,
                        int scale_a, int scale_b, bool trans_b);
void wgmma_fence();
void wgmma_commit_group();
void wgmma_wait_group(int pending);

void fence_proxy_async();
long async_proxy_fence_count();  // on this host thread, since it started
void setmaxnreg(uint32_t registers, bool increase);

}  // namespace cpgen::emulation
