// Warp-level primitives of sm_80+ as inline PTX (no CUDA toolkit header is available under
// NVRTC): 16-byte cp.async with commit/wait groups, ldmatrix (plain and transposed), mma.sync
// m16n8k16 with fp32 accumulation, and fp32 -> bf16x2/fp16x2 packing.
#pragma once

#include "cpgen/traits.cuh"

// CPGEN_EMULATION: the CPU emulator of emulation/ provides each primitive, so the
// same kernel source runs (slowly) on a host without a GPU.
#if defined(__CUDACC__)

namespace cpgen {
namespace device {

using u32 = unsigned int;

// Two fp32 values packed into one 32-bit register, lo in bits 0-15 (the lower column or key).
template <typename T>
CPGEN_DEVICE u32 pack2(float lo, float hi);
template <>
CPGEN_DEVICE u32 pack2<Bf16>(float lo, float hi) {
#if defined(CPGEN_EMULATION)
  return emulation::pack_16x2(lo, hi, true);
#else
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}
template <>
CPGEN_DEVICE u32 pack2<Fp16>(float lo, float hi) {
#if defined(CPGEN_EMULATION)
  return emulation::pack_16x2(lo, hi, false);
#else
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}

// d += a * b for one 16x8x16 tile: a 4 registers (row-major A), b 2 (column-major B), d 4 fp32.
template <typename T>
CPGEN_DEVICE void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1);
template <>
CPGEN_DEVICE void mma_16816<Bf16>(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if defined(CPGEN_EMULATION)
  emulation::mma_16816(d, a, b0, b1, true);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
template <>
CPGEN_DEVICE void mma_16816<Fp16>(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if defined(CPGEN_EMULATION)
  emulation::mma_16816(d, a, b0, b1, false);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// 32-bit shared-window address of a generic pointer into shared memory.
CPGEN_DEVICE u32 shared_address(const void* p) {
#if defined(CPGEN_EMULATION)
  return emulation::shared_offset(p);
#else
  u32 r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }\n" : "=r"(r) : "l"(p));
  return r;
#endif
}

// Four 8x8 16-bit matrices; this lane's row address is `address` (see layout.cuh for which row).
CPGEN_DEVICE void ldmatrix_x4(u32 (&r)[4], u32 address CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::ldmatrix_x4(r, address, false);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#endif
}
CPGEN_DEVICE void ldmatrix_x4_trans(u32 (&r)[4], u32 address CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::ldmatrix_x4(r, address, true);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#endif
}

// 16 bytes global -> shared, bypassing L1; when !valid the source is not read and the 16 bytes
// are zero-filled (out-of-range rows contribute zero scores and zero values).
CPGEN_DEVICE void cp_async_16(u32 shared_dst, const void* global_src, bool valid CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::cp_async_16(shared_dst, global_src, valid);
#else
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_dst), "l"(global_src),
               "r"(src_bytes));
#endif
}
CPGEN_DEVICE void cp_async_commit() {
#if defined(CPGEN_EMULATION)
  emulation::cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
CPGEN_DEVICE void cp_async_wait(CPGEN_SITE_ONLY) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::cp_async_wait(kPending);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

}  // namespace device
}  // namespace cpgen

#endif  // __CUDACC__
