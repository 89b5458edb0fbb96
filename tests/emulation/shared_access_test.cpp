// The templates' plain shared loads and stores (templates/shared_access.cuh) under the emulator's
// sanitizer: each a tiny kernel that breaks one rule (a store and a load of another warp with no
// barrier between, either way round; a load of bytes never written; a store past the dynamic
// shared memory), next to the same kernel done right, whose values arrive.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hopper_test_util.h"  // first: defines __CUDACC__ and the CUDA keywords
#include "cpgen/shared_access.cuh"

namespace cpgen {
namespace {

using device::load_shared;
using device::store_shared;
using testing::expect_finding;

float* table() { return reinterpret_cast<float*>(device::shared_storage); }
std::vector<float> g_seen;

// Warp 0 writes a table of 32 floats, warp 1 reads it back reversed: ordered by __syncthreads,
// or not at all.
template <bool kBarrier>
void write_then_read() {
  const unsigned t = threadIdx.x;
  if (t < 32) store_shared(&table()[t], 1.5f * static_cast<float>(t));
  if (kBarrier) __syncthreads();
  if (t >= 32) g_seen[t - 32] = load_shared(&table()[63 - t]);
}

TEST(SharedAccess, AStoreAndALoadOfAnotherWarpNeedABarrier) {
  g_seen.assign(32, -1.0f);
  ASSERT_EQ(emulation::launch(1, 1, 64, 128, write_then_read<true>), "");
  for (int i = 0; i < 32; ++i) EXPECT_EQ(g_seen[static_cast<size_t>(i)], 1.5f * static_cast<float>(31 - i));
  expect_finding(emulation::launch(1, 1, 64, 128, write_then_read<false>),
                 {"a shared load reads shared byte 0x", "accessed with no barrier between them (race)",
                  "shared_access_test.cpp:"});
}

// Warp 1 reads an entry, then warp 0 overwrites it with no barrier between: a write after read.
template <bool kBarrier>
void read_then_overwrite() {
  const unsigned t = threadIdx.x;
  if (t < 32) store_shared(&table()[t], 1.0f);
  __syncthreads();
  if (t >= 32) g_seen[t - 32] = load_shared(&table()[t - 32]);
  if (kBarrier) __syncthreads();
  if (t < 32) store_shared(&table()[t], 2.0f);
}

TEST(SharedAccess, AnOverwriteOfWhatAnotherWarpReadNeedsABarrier) {
  g_seen.assign(32, -1.0f);
  ASSERT_EQ(emulation::launch(1, 1, 64, 128, read_then_overwrite<true>), "");
  for (float v : g_seen) EXPECT_EQ(v, 1.0f);
  // Warp 0 runs ahead to its store while warp 1 has not read yet; either order is a race.
  expect_finding(emulation::launch(1, 1, 64, 128, read_then_overwrite<false>),
                 {"shared byte 0x", "accessed with no barrier between them (race)"});
}

// An 8-byte pair of floats at a 4-byte offset: the GPU loads it with one 8-byte access, which
// must be 8-byte aligned (PTX ISA, "Addresses as Operands"); at offset 8 it is clean.
struct alignas(8) FloatPair {
  float x, y;
};

template <int kOffset>
void pair_at_offset() {
  auto* pair = reinterpret_cast<FloatPair*>(device::shared_storage + kOffset);
  if (threadIdx.x == 0) store_shared(pair, FloatPair{1.0f, 2.0f});
  __syncthreads();
  if (threadIdx.x == 1) g_seen[0] = load_shared(pair).y;
}

TEST(SharedAccess, AnAccessOffItsTypesAlignmentIsCaught) {
  g_seen.assign(1, -1.0f);
  ASSERT_EQ(emulation::launch(1, 1, 32, 64, pair_at_offset<8>), "");
  EXPECT_EQ(g_seen[0], 2.0f);
  expect_finding(emulation::launch(1, 1, 32, 64, pair_at_offset<4>),
                 {"thread 0 of block (0, 0, 0): a shared store writes at shared address 0x4, not aligned to 8 bytes",
                  "shared_access_test.cpp:"});
}

TEST(SharedAccess, ALoadOfBytesNeverWrittenIsCaught) {
  g_seen.assign(32, 0.0f);
  expect_finding(emulation::launch(1, 1, 32, 128, [] { g_seen[threadIdx.x] = load_shared(&table()[threadIdx.x]); }),
                 {"a shared load reads shared byte 0x", ", never written in this CTA"});
}

TEST(SharedAccess, AStorePastTheDynamicSharedMemoryIsCaughtAndNotMade) {
  // Entry 32 is bytes 128-131 of a 128-byte launch; the store is reported and skipped, so the
  // guard region past the declared size stays intact (no second finding).
  const std::string error = emulation::launch(1, 1, 32, 128, [] {
    if (threadIdx.x == 3) store_shared(&table()[32], 7.0f);
  });
  expect_finding(error, {"thread 3 of block (0, 0, 0): a shared store writes shared bytes [0x80, 0x84) past the "
                         "launch's 128 dynamic shared bytes"});
  EXPECT_EQ(error.find("more findings"), std::string::npos) << error;
}

}  // namespace
}  // namespace cpgen
