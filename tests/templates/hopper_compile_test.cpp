// templates/hopper.cuh compiles with NVRTC for sm_90a: a tiny kernel that calls every wrapper
// (mbarrier init/arrive/expect_tx/complete_tx/try_wait, TMA loads of every rank, wgmma with A from
// shared memory and from registers at every N that has inline PTX, both transposes, fences,
// commit/wait, fence.proxy.async, setmaxnreg) and the CTA barriers by id of named_barrier.cuh.
// When cuobjdump is found (testing::disassemble_cubin), its SASS must hold the Hopper instructions
// (HGMMA, UTMALDG, SYNCS for the mbarrier) and the barriers; otherwise that part is skipped with
// a message. Needs no GPU.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "cpgen/error.h"
#include "runtime/jit/jit.h"
#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

const char* kProbe = R"(
#include "cpgen/hopper.cuh"
#include "cpgen/named_barrier.cuh"
using namespace cpgen::device;

struct ProbeParams {
  TmaMap maps[5];
  float* out;
  int mode;
};

template <int N>
__device__ void probe_n(float* out, u64 a, u64 b, const u32 (&regs)[4]) {
  float d[N / 2];
  wgmma_fence();
  wgmma_ss<Bf16, N>(d, a, b, false);
  wgmma_ss<Fp16, N, true, true>(d, a, b, true);
  wgmma_rs<Bf16, N>(d, regs, b, true);
  wgmma_rs<Fp16, N, true>(d, regs, b, true);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operand(d);
  for (int i = 0; i < N / 2; ++i) out[threadIdx.x * (N / 2) + i] = d[i];
}

extern "C" __global__ void __launch_bounds__(256) hopper_probe(const __grid_constant__ ProbeParams p) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const u32 bar = shared_address(smem), tile = shared_address(smem + 1024);
  if (threadIdx.x == 0) mbarrier_init(bar, 1);
  __syncthreads();
  if (threadIdx.x < 128) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(bar, 5 * 2048);
      const int c1[1] = {0};
      const int c2[2] = {0, 1};
      const int c3[3] = {0, 1, 2};
      const int c4[4] = {0, 1, 2, 3};
      const int c5[5] = {0, 1, 2, 3, 4};
      tma_load<1>(tile, p.maps[0], c1, bar);
      tma_load<2>(tile + 2048, p.maps[1], c2, bar);
      tma_load<3>(tile + 4096, p.maps[2], c3, bar);
      tma_load<4>(tile + 6144, p.maps[3], c4, bar);
      tma_load<5>(tile + 8192, p.maps[4], c5, bar);
      mbarrier_complete_tx(bar, 0);
    }
    return;
  }
  setmaxnreg_inc<232>();
  while (!mbarrier_try_wait_parity(bar, 0)) {
  }
  mbarrier_wait_parity(bar, 0);
  fence_proxy_async();
  named_barrier_sync(1 + (p.mode & 1), 128);
  named_barrier_arrive(3, 256);
  const u64 a = wgmma_descriptor(tile, 16, 1024, kWgmmaSwizzle128B);
  const u64 b = wgmma_descriptor(tile + 8192, 16, 1024, kWgmmaSwizzle128B);
  const u32 regs[4] = {threadIdx.x, threadIdx.x + 1, threadIdx.x + 2, threadIdx.x + 3};
  switch (p.mode) {
    case 8: probe_n<8>(p.out, a, b, regs); break;
    case 16: probe_n<16>(p.out, a, b, regs); break;
    case 32: probe_n<32>(p.out, a, b, regs); break;
    case 64: probe_n<64>(p.out, a, b, regs); break;
    case 128: probe_n<128>(p.out, a, b, regs); break;
    default: probe_n<256>(p.out, a, b, regs); break;
  }
  mbarrier_arrive(bar);
}
)";

// The probe's compile, once per process (both tests read it).
const CompiledKernel& probe() {
  static const CompiledKernel k = compile_source("hopper_probe", kProbe, "sm_90a", nullptr);
  return k;
}

TEST(HopperCompile, EveryWrapperCompilesForSm90a) {
  try {
    const CompiledKernel& k = probe();
    EXPECT_GT(k.cubin.size(), 0u);
    EXPECT_EQ(k.stats.spill_bytes, 0) << k.log;
    EXPECT_EQ(k.stats.stack_bytes, 0) << k.log;
  } catch (const Error& e) {
    FAIL() << e.what();
  }
}

TEST(HopperCompile, SassHoldsHopperInstructions) {
  std::string bytes;
  try {
    bytes = probe().cubin;
  } catch (const Error& e) {
    FAIL() << e.what();
  }
  testing::TempDir dir("hopper_compile");
  const std::string cubin = dir.path() + "/probe.cubin";
  std::ofstream(cubin, std::ios::binary) << bytes;
  std::string skip;
  const std::string text = testing::disassemble_cubin(cubin, &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  // SYNCS: the mbarrier operations; BAR.SYNC / BAR.ARV: the CTA barriers by id.
  for (const char* instruction : {"HGMMA", "UTMALDG", "SYNCS", "BAR.SYNC", "BAR.ARV"})
    EXPECT_NE(text.find(instruction), std::string::npos) << instruction << " missing from the SASS";
}

}  // namespace
}  // namespace cpgen
