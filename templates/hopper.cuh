// The sm_90a (Hopper) primitives as inline PTX, and under CPGEN_EMULATION as calls into the CPU
// emulator (emulation/hopper_emulation.h), the pattern of mma.cuh: mbarriers with transaction
// counts, TMA tiled loads (cp.async.bulk.tensor), warpgroup MMA (wgmma.mma_async) from
// shared-memory matrix descriptors or A from registers, the wgmma fences and groups,
// fence.proxy.async and setmaxnreg. PTX ISA 8.0+, target sm_90a (wgmma and setmaxnreg exist on
// the arch-specific target only).
//
// Tensor maps: on the GPU a kernel gets the driver's CUtensorMap (cuTensorMapEncodeTiled) as a
// `const __grid_constant__` kernel parameter, or a member of one, and hands its address to the
// copy; TmaMap below is those 128 bytes. Under the emulator the same 128 bytes hold the
// emulator's map (emulation/tensor_map.h, encode_tensor_map_tiled with the same arguments), and
// the emulated copy reads it through the same reference, so a params struct with TmaMap members
// serves both.
#pragma once

#include "cpgen/mma.cuh"

namespace cpgen {
namespace device {

using u64 = unsigned long long;

// The 128 bytes of a tensor map. The driver requires 64-byte alignment; 128 (which implies it)
// gives each TmaMap member of a params struct 128 bytes of its own.
struct alignas(128) TmaMap {
  u64 words[16];
};

// The swizzle field of a wgmma matrix descriptor (bits 62-63).
constexpr unsigned kWgmmaSwizzleNone = 0;
constexpr unsigned kWgmmaSwizzle128B = 1;
constexpr unsigned kWgmmaSwizzle64B = 2;
constexpr unsigned kWgmmaSwizzle32B = 3;

// A wgmma matrix descriptor, as the ISA's "Matrix Descriptor Format" lays it out: the start
// address (shared window), the leading and stride dimension byte offsets, each stored as
// (x & 0x3FFFF) >> 4 in 14 bits (0-13, 16-29, 32-45); the base offset in bits 49-51 (0 when a
// swizzled operand starts at its pattern's 1024/512/256-byte boundary); the swizzle in 62-63.
// Host and device, so CPU tests can check it.
CPGEN_HOST_DEVICE constexpr u64 wgmma_descriptor(unsigned address, unsigned leading_byte_offset,
                                                 unsigned stride_byte_offset, unsigned swizzle,
                                                 unsigned base_offset = 0) {
  return static_cast<u64>((address & 0x3FFFFu) >> 4) | static_cast<u64>((leading_byte_offset & 0x3FFFFu) >> 4) << 16 |
         static_cast<u64>((stride_byte_offset & 0x3FFFFu) >> 4) << 32 | static_cast<u64>(base_offset & 7u) << 49 |
         static_cast<u64>(swizzle & 3u) << 62;
}

// The descriptor of the same matrix layout `bytes` (a multiple of 16) further on: the start
// address field grows by bytes / 16 and nothing else changes. The field cannot carry into the
// leading byte offset while the new address stays below 2^18, which every address of a CTA's
// shared memory (at most 228 KB) does. A kernel computes one descriptor per tile and advances it
// per k-step, one 32-bit add, where a full wgmma_descriptor per k-step costs a mask, a shift and
// an OR each time.
CPGEN_HOST_DEVICE constexpr u64 wgmma_descriptor_advance(u64 descriptor, unsigned bytes) {
  return (descriptor & 0xFFFFFFFF00000000ull) | static_cast<unsigned>(static_cast<unsigned>(descriptor) + (bytes >> 4));
}

}  // namespace device
}  // namespace cpgen

#if defined(__CUDACC__)

#if defined(CPGEN_EMULATION) && !defined(CPGEN_EMULATION_HOPPER)
#error "templates/hopper.cuh under the emulator needs CPGEN_EMULATION_HOPPER defined for emulation/cuda_emulation.cpp"
#endif

namespace cpgen {
namespace device {

template <typename T>
struct IsBf16 {
  static constexpr bool value = false;
};
template <>
struct IsBf16<Bf16> {
  static constexpr bool value = true;
};

// ---- mbarrier (a 64-bit object in shared memory, addressed by its shared-window address) ----

CPGEN_DEVICE void mbarrier_init(u32 barrier, u32 count CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::mbarrier_init(barrier, count);
#else
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(count) : "memory");
#endif
}

// Returns the state token of the phase this arrival counted in.
CPGEN_DEVICE u64 mbarrier_arrive(u32 barrier CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  return emulation::mbarrier_arrive(barrier);
#else
  u64 state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n" : "=l"(state) : "r"(barrier) : "memory");
  return state;
#endif
}

// Raises the phase's transaction count by `bytes`, then arrives.
CPGEN_DEVICE u64 mbarrier_arrive_expect_tx(u32 barrier, u32 bytes CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  return emulation::mbarrier_arrive_expect_tx(barrier, bytes);
#else
  u64 state;
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;\n"
               : "=l"(state)
               : "r"(barrier), "r"(bytes)
               : "memory");
  return state;
#endif
}

// Lowers the transaction count by `bytes` (what a TMA copy does when it lands).
CPGEN_DEVICE void mbarrier_complete_tx(u32 barrier, u32 bytes CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::mbarrier_complete_tx(barrier, bytes);
#else
  asm volatile("mbarrier.complete_tx.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
#endif
}

// Whether the phase of parity `parity` has completed (the hardware may also give up after a
// time limit and answer false; callers loop).
CPGEN_DEVICE bool mbarrier_try_wait_parity(u32 barrier, u32 parity CPGEN_SITE) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  return emulation::mbarrier_try_wait_parity(barrier, parity);
#else
  u32 done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(barrier), "r"(parity)
      : "memory");
  return done != 0;
#endif
}

CPGEN_DEVICE void mbarrier_wait_parity(u32 barrier, u32 parity CPGEN_SITE) {
  while (!mbarrier_try_wait_parity(barrier, parity CPGEN_PASS_SITE)) {
  }
}

// ---- TMA ----

// The box of `map` at `coords` (innermost first, in elements, may lie partly outside the
// tensor: those elements read as zero) into shared memory at `shared_dst`, completing its bytes
// on the mbarrier at `barrier`.
template <int kRank>
CPGEN_DEVICE void tma_load(u32 shared_dst, const TmaMap& map, const int (&coords)[kRank], u32 barrier CPGEN_SITE) {
  static_assert(kRank >= 1 && kRank <= 5, "cp.async.bulk.tensor has ranks 1 to 5");
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::tma_load(shared_dst, &map, coords, kRank, barrier);
#else
  const u64 m = reinterpret_cast<u64>(&map);
  if constexpr (kRank == 1) {
    asm volatile(
        "cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2}], [%3];\n" ::"r"(
            shared_dst),
        "l"(m), "r"(coords[0]), "r"(barrier)
        : "memory");
  } else if constexpr (kRank == 2) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
        "[%4];\n" ::"r"(shared_dst),
        "l"(m), "r"(coords[0]), "r"(coords[1]), "r"(barrier)
        : "memory");
  } else if constexpr (kRank == 3) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];\n" ::"r"(shared_dst),
        "l"(m), "r"(coords[0]), "r"(coords[1]), "r"(coords[2]), "r"(barrier)
        : "memory");
  } else if constexpr (kRank == 4) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
        "%5}], [%6];\n" ::"r"(shared_dst),
        "l"(m), "r"(coords[0]), "r"(coords[1]), "r"(coords[2]), "r"(coords[3]), "r"(barrier)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
        "%5, %6}], [%7];\n" ::"r"(shared_dst),
        "l"(m), "r"(coords[0]), "r"(coords[1]), "r"(coords[2]), "r"(coords[3]), "r"(coords[4]), "r"(barrier)
        : "memory");
  }
#endif
}

// Orders this thread's generic-proxy shared-memory writes before later async-proxy accesses
// (wgmma reading a tile the threads wrote, TMA stores).
CPGEN_DEVICE void fence_proxy_async(CPGEN_SITE_ONLY) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::fence_proxy_async();
#else
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// ---- register budget of a warpgroup (producer warps give registers to consumers) ----

template <int kRegisters>
CPGEN_DEVICE void setmaxnreg_inc(CPGEN_SITE_ONLY) {
  static_assert(kRegisters >= 24 && kRegisters <= 256 && kRegisters % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::setmaxnreg(kRegisters, true);
#else
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}
template <int kRegisters>
CPGEN_DEVICE void setmaxnreg_dec(CPGEN_SITE_ONLY) {
  static_assert(kRegisters >= 24 && kRegisters <= 256 && kRegisters % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::setmaxnreg(kRegisters, false);
#else
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}

// ---- wgmma ----

// Before the first wgmma.mma_async of a batch: orders the warpgroup's earlier register accesses
// (accumulators, A fragments) before the asynchronous MMA reads them.
CPGEN_DEVICE void wgmma_fence(CPGEN_SITE_ONLY) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::wgmma_fence();
#else
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
CPGEN_DEVICE void wgmma_commit(CPGEN_SITE_ONLY) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::wgmma_commit_group();
#else
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most kPending of this thread's committed wgmma groups are in flight; only then
// may their accumulators be read.
template <int kPending>
CPGEN_DEVICE void wgmma_wait(CPGEN_SITE_ONLY) {
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::wgmma_wait_group(kPending);
#else
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Keeps the compiler from moving accesses of accumulator registers across a wgmma wait (the asm
// of the MMA itself does not tell it when the registers change).
template <int kRegs>
CPGEN_DEVICE void wgmma_fence_operand(float (&d)[kRegs]) {
#if !defined(CPGEN_EMULATION)
  for (int i = 0; i < kRegs; ++i) asm volatile("" : "+f"(d[i])::"memory");
#endif
}

#if !defined(CPGEN_EMULATION)
// The inline PTX of wgmma.mma_async m64nNk16 with f32 accumulators, one specialization per N.
// Operands: the N/2 accumulators first (%0..), then A (descriptor, or four registers), the B
// descriptor, scale-d as a register turned into the predicate, and the immediates scale-a,
// scale-b (1: no negation), trans-a (SS only) and trans-b.
#define CPGEN_WG_R8_0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define CPGEN_WG_R8_1 "%8, %9, %10, %11, %12, %13, %14, %15"
#define CPGEN_WG_R8_2 "%16, %17, %18, %19, %20, %21, %22, %23"
#define CPGEN_WG_R8_3 "%24, %25, %26, %27, %28, %29, %30, %31"
#define CPGEN_WG_R8_4 "%32, %33, %34, %35, %36, %37, %38, %39"
#define CPGEN_WG_R8_5 "%40, %41, %42, %43, %44, %45, %46, %47"
#define CPGEN_WG_R8_6 "%48, %49, %50, %51, %52, %53, %54, %55"
#define CPGEN_WG_R8_7 "%56, %57, %58, %59, %60, %61, %62, %63"
#define CPGEN_WG_R8_8 "%64, %65, %66, %67, %68, %69, %70, %71"
#define CPGEN_WG_R8_9 "%72, %73, %74, %75, %76, %77, %78, %79"
#define CPGEN_WG_R8_10 "%80, %81, %82, %83, %84, %85, %86, %87"
#define CPGEN_WG_R8_11 "%88, %89, %90, %91, %92, %93, %94, %95"
#define CPGEN_WG_R8_12 "%96, %97, %98, %99, %100, %101, %102, %103"
#define CPGEN_WG_R8_13 "%104, %105, %106, %107, %108, %109, %110, %111"
#define CPGEN_WG_R8_14 "%112, %113, %114, %115, %116, %117, %118, %119"
#define CPGEN_WG_R8_15 "%120, %121, %122, %123, %124, %125, %126, %127"
// CPGEN_WG_REGS_N: the N/2 accumulator operands "%0, ..., %(N/2 - 1)".
#define CPGEN_WG_REGS_8 "%0, %1, %2, %3"
#define CPGEN_WG_REGS_16 CPGEN_WG_R8_0
#define CPGEN_WG_REGS_32 CPGEN_WG_R8_0 ", " CPGEN_WG_R8_1
#define CPGEN_WG_REGS_64 CPGEN_WG_REGS_32 ", " CPGEN_WG_R8_2 ", " CPGEN_WG_R8_3
#define CPGEN_WG_REGS_80 CPGEN_WG_REGS_64 ", " CPGEN_WG_R8_4
#define CPGEN_WG_REGS_96 CPGEN_WG_REGS_64 ", " CPGEN_WG_R8_4 ", " CPGEN_WG_R8_5
#define CPGEN_WG_REGS_128 CPGEN_WG_REGS_64 ", " CPGEN_WG_R8_4 ", " CPGEN_WG_R8_5 ", " CPGEN_WG_R8_6 ", " CPGEN_WG_R8_7
#define CPGEN_WG_REGS_176 CPGEN_WG_REGS_128 ", " CPGEN_WG_R8_8 ", " CPGEN_WG_R8_9 ", " CPGEN_WG_R8_10
#define CPGEN_WG_REGS_256                                                                                         \
  CPGEN_WG_REGS_128 ", " CPGEN_WG_R8_8 ", " CPGEN_WG_R8_9 ", " CPGEN_WG_R8_10 ", " CPGEN_WG_R8_11 ", " CPGEN_WG_R8_12 \
                    ", " CPGEN_WG_R8_13 ", " CPGEN_WG_R8_14 ", " CPGEN_WG_R8_15
// CPGEN_WG_OUT_R: the R accumulators as read-write operands.
#define CPGEN_WG_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define CPGEN_WG_D16(i) CPGEN_WG_D4(i), CPGEN_WG_D4(i + 4), CPGEN_WG_D4(i + 8), CPGEN_WG_D4(i + 12)
#define CPGEN_WG_OUT_4 CPGEN_WG_D4(0)
#define CPGEN_WG_OUT_8 CPGEN_WG_D4(0), CPGEN_WG_D4(4)
#define CPGEN_WG_OUT_16 CPGEN_WG_D16(0)
#define CPGEN_WG_OUT_32 CPGEN_WG_D16(0), CPGEN_WG_D16(16)
#define CPGEN_WG_OUT_64 CPGEN_WG_OUT_32, CPGEN_WG_D16(32), CPGEN_WG_D16(48)
#define CPGEN_WG_OUT_40 CPGEN_WG_OUT_32, CPGEN_WG_D4(32), CPGEN_WG_D4(36)
#define CPGEN_WG_OUT_48 CPGEN_WG_OUT_32, CPGEN_WG_D16(32)
#define CPGEN_WG_OUT_88 CPGEN_WG_OUT_64, CPGEN_WG_D16(64), CPGEN_WG_D4(80), CPGEN_WG_D4(84)
#define CPGEN_WG_OUT_128 CPGEN_WG_OUT_64, CPGEN_WG_D16(64), CPGEN_WG_D16(80), CPGEN_WG_D16(96), CPGEN_WG_D16(112)
#define CPGEN_WG_SS_TEXT(N, T, REGS, a, b, s, sa, sb, ta, tb)                                                  \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %" #s ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." T "." T " {" REGS \
  "}, %" #a ", %" #b ", p, %" #sa ", %" #sb ", %" #ta ", %" #tb ";\n}\n"
#define CPGEN_WG_RS_TEXT(N, T, REGS, a0, a1, a2, a3, b, s, sa, sb, tb)                                        \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %" #s ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." T "." T " {" REGS \
  "}, {%" #a0 ", %" #a1 ", %" #a2 ", %" #a3 "}, %" #b ", p, %" #sa ", %" #sb ", %" #tb ";\n}\n"
// R = N / 2 accumulators; the SS operand numbers R..R+6 and the RS ones R..R+8 follow as literals.
#define CPGEN_WG_DEFINE(N, R, S0, S1, S2, S3, S4, S5, S6, Q7, Q8)                                                 \
  template <>                                                                                                    \
  struct WgmmaAsm<N> {                                                                                           \
    template <bool kBf16, int kTransA, int kTransB>                                                              \
    static CPGEN_DEVICE void ss(float* d, u64 desc_a, u64 desc_b, u32 accumulate) {                             \
      if constexpr (kBf16)                                                                                       \
        asm volatile(CPGEN_WG_SS_TEXT(N, "bf16", CPGEN_WG_REGS_##N, S0, S1, S2, S3, S4, S5, S6)                  \
                     : CPGEN_WG_OUT_##R                                                                          \
                     : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(1), "n"(1), "n"(kTransA), "n"(kTransB));   \
      else                                                                                                       \
        asm volatile(CPGEN_WG_SS_TEXT(N, "f16", CPGEN_WG_REGS_##N, S0, S1, S2, S3, S4, S5, S6)                   \
                     : CPGEN_WG_OUT_##R                                                                          \
                     : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(1), "n"(1), "n"(kTransA), "n"(kTransB));   \
    }                                                                                                            \
    template <bool kBf16, int kTransB>                                                                           \
    static CPGEN_DEVICE void rs(float* d, const u32* a, u64 desc_b, u32 accumulate) {                           \
      if constexpr (kBf16)                                                                                       \
        asm volatile(CPGEN_WG_RS_TEXT(N, "bf16", CPGEN_WG_REGS_##N, S0, S1, S2, S3, S4, S5, S6, Q7, Q8)          \
                     : CPGEN_WG_OUT_##R                                                                          \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(1), "n"(1), \
                       "n"(kTransB));                                                                            \
      else                                                                                                       \
        asm volatile(CPGEN_WG_RS_TEXT(N, "f16", CPGEN_WG_REGS_##N, S0, S1, S2, S3, S4, S5, S6, Q7, Q8)           \
                     : CPGEN_WG_OUT_##R                                                                          \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(1), "n"(1), \
                       "n"(kTransB));                                                                            \
    }                                                                                                            \
  };

template <int N>
struct WgmmaAsm;  // no inline PTX for this N: add its CPGEN_WG_DEFINE line
CPGEN_WG_DEFINE(8, 4, 4, 5, 6, 7, 8, 9, 10, 11, 12)
CPGEN_WG_DEFINE(16, 8, 8, 9, 10, 11, 12, 13, 14, 15, 16)
CPGEN_WG_DEFINE(32, 16, 16, 17, 18, 19, 20, 21, 22, 23, 24)
CPGEN_WG_DEFINE(64, 32, 32, 33, 34, 35, 36, 37, 38, 39, 40)
CPGEN_WG_DEFINE(80, 40, 40, 41, 42, 43, 44, 45, 46, 47, 48)  // S of 80-key tiles (head dim 256)
CPGEN_WG_DEFINE(96, 48, 48, 49, 50, 51, 52, 53, 54, 55, 56)  // O += P V at head dim 96
CPGEN_WG_DEFINE(128, 64, 64, 65, 66, 67, 68, 69, 70, 71, 72)
CPGEN_WG_DEFINE(176, 88, 88, 89, 90, 91, 92, 93, 94, 95, 96)  // S of 176-key tiles
CPGEN_WG_DEFINE(256, 128, 128, 129, 130, 131, 132, 133, 134, 135, 136)
#endif  // !CPGEN_EMULATION

// d (64 x N, this thread's N/2 registers) = A * B, plus d when `accumulate`; A (64 x 16) and B
// (16 x N) in shared memory through descriptors, K-major, or MN-major when kTransA / kTransB.
// The result is in d only after the wgmma_wait that retires the group. Inline PTX exists for
// N = 8, 16, 32, 64, 80, 96, 128, 176, 256; the emulator takes any multiple of 8 up to 256.
template <typename T, int N, bool kTransA = false, bool kTransB = false>
CPGEN_DEVICE void wgmma_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b, bool accumulate CPGEN_SITE) {
  static_assert(N >= 8 && N <= 256 && N % 8 == 0, "wgmma m64nNk16: N is a multiple of 8 from 8 to 256");
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::wgmma_mma_async_ss(d, N, IsBf16<T>::value, desc_a, desc_b, accumulate, 1, 1, kTransA, kTransB);
#else
  WgmmaAsm<N>::template ss<IsBf16<T>::value, kTransA ? 1 : 0, kTransB ? 1 : 0>(d, desc_a, desc_b, accumulate ? 1u : 0u);
#endif
}

// The same with A from registers: a[0] (row g, k 2t..2t+1), a[1] (row g+8), a[2] (row g, k
// 2t+8..2t+9), a[3] (row g+8, k 2t+8..), rows relative to 16 x the warp's index in the warpgroup,
// g = lane / 4, t = lane % 4 (the mma.m16n8k16 A fragment; pack2 builds the registers).
template <typename T, int N, bool kTransB = false>
CPGEN_DEVICE void wgmma_rs(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b, bool accumulate CPGEN_SITE) {
  static_assert(N >= 8 && N <= 256 && N % 8 == 0, "wgmma m64nNk16: N is a multiple of 8 from 8 to 256");
#if defined(CPGEN_EMULATION)
  CPGEN_AT_SITE();
  emulation::wgmma_mma_async_rs(d, N, IsBf16<T>::value, a, desc_b, accumulate, 1, 1, kTransB);
#else
  WgmmaAsm<N>::template rs<IsBf16<T>::value, kTransB ? 1 : 0>(d, a, desc_b, accumulate ? 1u : 0u);
#endif
}

}  // namespace device
}  // namespace cpgen

#endif  // __CUDACC__
