// The cross-proxy fence (emulation/hopper_emulation.h): wgmma reads its shared operands through the
// async proxy, so bytes last written through the generic proxy (a thread's shared store, a cp.async
// landing) reach it only past a fence.proxy.async that happens after the write and before the read
// (PTX ISA, "Proxies" and wgmma's "Async Proxy"). Warpgroup 0 runs one m64n8k16 wgmma over
// operands that thread 200 (warpgroup 1) wrote; each case places the fence, or leaves it out.
#include <gtest/gtest.h>

#include <stdint.h>

#include <string>

#include "hopper_test_util.h"  // first: defines __CUDACC__ and the CUDA keywords
#include "cpgen/shared_access.cuh"

namespace cpgen {
namespace {

using testing::expect_finding;

constexpr int kWriter = 200;
constexpr uint32_t kOperandBytes = 4096;  // A (64 x 16, K-major, no swizzle) at 0, B (8 x 16) at 2048

// Where the fence goes, if anywhere.
enum class Fence { kNone, kWriterBeforeBarrier, kReadersAfterBarrier, kWriterAfterBarrier, kWriterBeforeStores };

// bf16 1.0 in both halves of every word, through the templates' checked shared stores.
void store_operands() {
  auto* words = reinterpret_cast<uint32_t*>(device::shared_storage);
  for (uint32_t i = 0; i < kOperandBytes / 4; ++i) device::store_shared(&words[i], 0x3f803f80u);
}

// Warpgroup 0's wgmma over those operands (testing::issue_small_wgmma), retired.
void one_wgmma() {
  float d[4] = {};
  testing::issue_small_wgmma(d);
  emulation::wgmma_wait_group(0);
}

template <Fence kFence>
void stores_then_wgmma() {
  if (threadIdx.x == kWriter) {
    if (kFence == Fence::kWriterBeforeStores) emulation::fence_proxy_async();
    store_operands();
    if (kFence == Fence::kWriterBeforeBarrier) emulation::fence_proxy_async();
  }
  __syncthreads();
  if (kFence == Fence::kWriterAfterBarrier && threadIdx.x == kWriter) emulation::fence_proxy_async();
  if (threadIdx.x >= 128) return;
  if (kFence == Fence::kReadersAfterBarrier) emulation::fence_proxy_async();
  one_wgmma();
}

std::string run(void (*body)()) { return emulation::launch(1, 1, 256, kOperandBytes, body); }

TEST(ProxyFence, GenericStoresReadByAWgmmaWithNoFenceAreAFinding) {
  expect_finding(run(stores_then_wgmma<Fence::kNone>),
                 {"of block (0, 0, 0): wgmma.mma_async reads A from shared byte 0x",
                  " that thread 200 wrote through the generic proxy (a store or cp.async), with no fence.proxy.async "
                  "ordered between that write and this async-proxy read at ",
                  "proxy_fence_test.cpp:"});
}

TEST(ProxyFence, AFenceByTheWriterBeforeItsBarrierOrByTheReadersAfterTheirsIsEnough) {
  EXPECT_EQ(run(stores_then_wgmma<Fence::kWriterBeforeBarrier>), "");
  EXPECT_EQ(run(stores_then_wgmma<Fence::kReadersAfterBarrier>), "");
}

// Regression: the emulator kept the CTA's latest 1024 fences, so a writer's fence followed by
// many others (here 1100 by thread 201, which writes nothing) was forgotten and its stores read as
// unfenced. Fences now travel with the order itself and none is dropped.
void fenced_stores_then_many_fences() {
  if (threadIdx.x == kWriter) {
    store_operands();
    emulation::fence_proxy_async();
  }
  if (threadIdx.x == kWriter + 1)
    for (int i = 0; i < 1100; ++i) emulation::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x < 128) one_wgmma();
}

TEST(ProxyFence, AWritersFenceStaysInForceAfterManyOtherFences) { EXPECT_EQ(run(fenced_stores_then_many_fences), ""); }

// The fence exists but is not between the write and the read: after the barrier on the writer's
// side (nothing orders it before the readers), or before the writes it should cover.
TEST(ProxyFence, AFenceNotOrderedBetweenTheWriteAndTheReadIsAFinding) {
  expect_finding(run(stores_then_wgmma<Fence::kWriterAfterBarrier>),
                 {"wgmma.mma_async reads A from shared byte 0x", " that thread 200 wrote through the generic proxy"});
  expect_finding(run(stores_then_wgmma<Fence::kWriterBeforeStores>),
                 {"wgmma.mma_async reads A from shared byte 0x", " that thread 200 wrote through the generic proxy"});
}

// cp.async (not bulk) lands through the generic proxy too; TMA (async proxy) needs no fence, which
// the TMA-fed wgmma tests (wgmma_test.cpp, the wgmma kernels' emulated runs) show clean.
alignas(16) uint16_t g_operands[kOperandBytes / 2];

template <bool kFenced>
void cp_async_then_wgmma() {
  if (threadIdx.x == kWriter) {
    for (uint32_t at = 0; at < kOperandBytes; at += 16)
      emulation::cp_async_16(at, reinterpret_cast<const unsigned char*>(g_operands) + at, true);
    emulation::cp_async_commit();
    emulation::cp_async_wait(0);
    if (kFenced) emulation::fence_proxy_async();
  }
  __syncthreads();
  if (threadIdx.x < 128) one_wgmma();
}

TEST(ProxyFence, CpAsyncLandingsReadByAWgmmaNeedTheFenceToo) {
  for (uint16_t& e : g_operands) e = 0x3f80;
  testing::LaunchBuffers buffers({{g_operands, sizeof g_operands}});
  expect_finding(run(cp_async_then_wgmma<false>),
                 {"wgmma.mma_async reads A from shared byte 0x", " that thread 200 wrote through the generic proxy"});
  EXPECT_EQ(run(cp_async_then_wgmma<true>), "");
}

}  // namespace
}  // namespace cpgen
