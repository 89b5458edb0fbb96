// The emulator's sanitizer (emulation/cuda_emulation.h, shared_shadow.h), each check against a
// deliberately broken tiny kernel that it must catch for the right reason, next to the same
// kernel done right that must pass. The kernels call the emulated PTX operations directly, as the
// templates' wrappers (templates/mma.cuh) do under the emulator. The real templates run under the
// same checks in the StepFwdEmulated/StepBwdEmulated tests and the emulated backend's tests.
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

// Last: defines __CUDACC__ and the CUDA keywords.
#include "emulation/cuda_emulation.h"
#include "emulation/shared_shadow.h"
#include "finding_test_util.h"
#include "shared_rows.h"
// The templates' wrappers, which pass their caller's source line to the sanitizer.
#include "cpgen/global_access.cuh"
#include "cpgen/mma.cuh"

namespace cpgen {
namespace {

using testing::expect_finding;

alignas(16) unsigned char g_source[256];

void copy_rows_in() { testing::copy_rows_in(g_source); }
using testing::load_rows;

TEST(Sanitizer, GlobalReadOutsideTheLaunchBuffersIsCaught) {
  testing::LaunchBuffers buffers({{g_source, 64}});
  // One past the end of the 64-byte buffer.
  std::string error = emulation::launch(1, 1, 32, 64, [] {
    if (threadIdx.x == 3) emulation::cp_async_16(0, g_source + 64, true);
  });
  expect_finding(error, {"thread 3 of block (0, 0, 0)", "cp.async reads global bytes", "outside every buffer"});
  // Inside, and an invalid (zero-filling) copy that reads nothing: clean.
  EXPECT_EQ(emulation::launch(1, 1, 32, 64, [] {
              if (threadIdx.x == 3) {
                emulation::cp_async_16(0, g_source + 48, true);
                emulation::cp_async_16(16, g_source + 4096, false);
              }
            }),
            "");
}

TEST(Sanitizer, ReductionOutsideTheLaunchBuffersIsCaught) {
  static float sums[8];
  testing::LaunchBuffers buffers({{sums, sizeof(float) * 4}});
  const std::string error = emulation::launch(1, 2, 32, 0, [] {
    if (threadIdx.x == 0) emulation::red_add_f32(&sums[4 * blockIdx.y], 1.0f);
  });
  // Block (0, 0) adds to sums[0], inside; block (0, 1) to sums[4], past the 4 registered floats.
  expect_finding(error, {"thread 0 of block (0, 1, 0)", "red.add writes global bytes"});
  EXPECT_EQ(sums[0], 1.0f);
  EXPECT_EQ(sums[4], 0.0f);  // the reported write does not happen
}

TEST(Sanitizer, SharedAccessBeyondTheDeclaredSizeIsCaught) {
  // A cp.async whose 16 bytes end past the 256 declared bytes.
  expect_finding(emulation::launch(1, 1, 32, 248, [] {
                   if (threadIdx.x == 1) emulation::cp_async_16(240, g_source, true);
                 }),
                 {"thread 1 of block (0, 0, 0)", "cp.async writes shared bytes [0xf0, 0x100)",
                  "past the launch's 248 dynamic shared bytes"});
  // An ldmatrix row address inside the emulator's buffer but outside the declaration.
  expect_finding(emulation::launch(1, 1, 32, 128, [] {
                   uint32_t r[4];
                   emulation::ldmatrix_x4(r, threadIdx.x == 9 ? 128 : 0, false);
                 }),
                 {"thread 9 of block (0, 0, 0)", "ldmatrix reads shared bytes [0x80, 0x90)"});
  // A plain store: seen by the guard region when the CTA ends.
  expect_finding(emulation::launch(1, 1, 32, 256, [] {
                   if (threadIdx.x == 0) device::shared_storage[300] = 1;
                 }),
                 {"block (0, 0, 0): a store to shared byte 0x12c past the launch's 256 dynamic shared bytes"});
}

// PTX ISA, "Addresses as Operands": an address must be naturally aligned to the access size
// (ldmatrix: to the 16 bytes four lanes read of a row), or the GPU may fault with a misaligned
// address, as compute-sanitizer reports it. Each access below is one element off, next to the
// same access aligned, which is clean.
TEST(Sanitizer, MisalignedAccessesAreCaught) {
  static float sums[8];
  testing::LaunchBuffers buffers({{g_source, sizeof g_source}, {sums, sizeof sums}});
  expect_finding(emulation::launch(1, 1, 32, 256, [] {
                   if (threadIdx.x == 2) emulation::cp_async_16(8, g_source, true);
                 }),
                 {"thread 2 of block (0, 0, 0)", "cp.async writes to shared address 0x8, not aligned to 16 bytes"});
  expect_finding(emulation::launch(1, 1, 32, 256, [] {
                   if (threadIdx.x == 2) emulation::cp_async_16(16, g_source + 8, true);
                 }),
                 {"thread 2 of block (0, 0, 0)", "cp.async reads from global address 0x", "not aligned to 16 bytes"});
  expect_finding(emulation::launch(1, 1, 32, 256, [] {
                   uint32_t r[4];
                   emulation::ldmatrix_x4(r, 16 * (threadIdx.x % 8) + (threadIdx.x == 5 ? 2 : 0), false);
                 }),
                 {"thread 5 of block (0, 0, 0)", "ldmatrix reads a row at shared address 0x52, not aligned to 16 bytes"});
  expect_finding(emulation::launch(1, 1, 32, 0, [] {
                   if (threadIdx.x == 0)
                     emulation::red_add_f32(reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(sums) + 2), 1.0f);
                 }),
                 {"thread 0 of block (0, 0, 0)", "red.add writes to global address 0x", "not aligned to 4 bytes"});
  // Aligned, the same accesses are clean (the rows the ldmatrix reads were written first).
  EXPECT_EQ(emulation::launch(1, 1, 32, 256, [] {
              copy_rows_in();
              __syncwarp();
              uint32_t r[4];
              emulation::ldmatrix_x4(r, 16 * (threadIdx.x % 8), false);
              if (threadIdx.x == 0) emulation::red_add_f32(&sums[1], 1.0f);
            }),
            "");
}

// The templates' plain global accesses through load_global/store_global (templates/
// global_access.cuh): an 8-byte pair of floats is one 64-bit access on the GPU, which faults off an
// 8-byte boundary, though the host would perform it; and an access past every buffer of the
// launch, which the host would perform too when it lands in other memory. Each next to the same
// access done right, which is clean, and the reported access does not happen.
TEST(Sanitizer, MisalignedOrStrayPlainGlobalAccessesAreCaught) {
  struct alignas(8) Pair {
    float x, y;
  };
  alignas(16) static float state[16];
  testing::LaunchBuffers buffers({{state, sizeof(float) * 8}});
  for (float& x : state) x = 0.0f;
  expect_finding(emulation::launch(1, 1, 32, 0, [] {
                   if (threadIdx.x == 4) device::store_global(reinterpret_cast<Pair*>(state + 1), Pair{1.0f, 2.0f});
                 }),
                 {"thread 4 of block (0, 0, 0)", "a global store writes to global address 0x", "not aligned to 8 bytes",
                  "sanitizer_test.cpp:"});
  EXPECT_EQ(state[1], 0.0f);
  EXPECT_EQ(state[2], 0.0f);
  expect_finding(emulation::launch(1, 1, 32, 0, [] {
                   if (threadIdx.x == 7) (void)device::load_global(reinterpret_cast<const Pair*>(state + 3));
                 }),
                 {"thread 7 of block (0, 0, 0)", "a global load reads from global address 0x", "not aligned to 8 bytes"});
  // In the 16 floats of the array but past the 8 the launch registered.
  expect_finding(emulation::launch(1, 1, 32, 0, [] {
                   if (threadIdx.x == 0) device::store_global(reinterpret_cast<Pair*>(state + 8), Pair{1.0f, 2.0f});
                 }),
                 {"thread 0 of block (0, 0, 0)", "a global store writes global bytes", "outside every buffer"});
  EXPECT_EQ(state[8], 0.0f);
  EXPECT_EQ(emulation::launch(1, 1, 32, 0, [] {
              if (threadIdx.x < 4) {
                Pair* at = reinterpret_cast<Pair*>(state + 2 * threadIdx.x);
                const Pair old = device::load_global(at);
                device::store_global(at, Pair{old.x + 1.0f, old.y + 2.0f});
              }
            }),
            "");
  EXPECT_EQ(state[6], 1.0f);
  EXPECT_EQ(state[7], 2.0f);
}

// compute-sanitizer initcheck's "uninitialized global memory read", for the emulated device's
// buffers: each allocation starts all ones (GlobalBuffer::poisoned), and a read through the
// emulator of an aligned word still holding that fill reads memory nothing wrote. Each read
// below is reported; the same reads of written words, and of the same all-ones words in a buffer
// not marked poisoned (there they are a value), are clean.
TEST(Sanitizer, ReadsOfNeverWrittenGlobalMemoryAreCaught) {
  struct alignas(8) Pair {
    float x, y;
  };
  alignas(16) static float state[16];
  alignas(16) static float plain[16];
  // Floats 0-7 written by the host (the first 32 bytes); 8-15 as allocated.
  auto reset = [] {
    memset(state, 0xFF, sizeof state);
    memset(plain, 0xFF, sizeof plain);
    for (int i = 0; i < 8; ++i) state[i] = 0.5f * static_cast<float>(i);
  };
  emulation::GlobalBuffer poisoned{state, sizeof state};
  poisoned.poisoned = true;
  testing::LaunchBuffers buffers({poisoned, {plain, sizeof plain}});
  reset();
  expect_finding(emulation::launch(1, 1, 32, 0, [] {
                   if (threadIdx.x == 6) (void)device::load_global(&state[10]);
                 }),
                 {"thread 6 of block (0, 0, 0)", "a global load reads global bytes", "bytes 40..43 of the 64-byte buffer",
                  "nothing wrote them (uninitialized read)", "sanitizer_test.cpp:"});
  // A pair whose second float was never written: reported as its own word.
  expect_finding(emulation::launch(1, 1, 32, 0, [] {
                   if (threadIdx.x == 0) {
                     state[8] = 1.0f;  // the host-side view of a store the kernel made
                     (void)device::load_global(reinterpret_cast<const Pair*>(state + 8));
                   }
                 }),
                 {"a global load reads global bytes", "bytes 36..39 of the 64-byte buffer"});
  reset();
  expect_finding(emulation::launch(1, 1, 32, 64, [] {
                   if (threadIdx.x == 1) emulation::cp_async_16(0, state + 4, true);  // floats 4-7, then 8-11
                   if (threadIdx.x == 2) emulation::cp_async_16(16, state + 8, true);
                   emulation::cp_async_commit();
                   emulation::cp_async_wait(0);
                 }),
                 {"thread 2 of block (0, 0, 0)", "cp.async reads global bytes", "bytes 32..35 of the 64-byte buffer"});
  expect_finding(emulation::launch(1, 1, 32, 0, [] {
                   if (threadIdx.x == 3) emulation::red_add_f32(&state[12], 1.0f);
                 }),
                 {"thread 3 of block (0, 0, 0)", "red.add adds to global bytes", "bytes 48..51 of the 64-byte buffer"});
  // Written words, by the host or by the kernel's own store before its load, and the same
  // all-ones words in a buffer that is not poisoned: clean.
  reset();
  EXPECT_EQ(emulation::launch(1, 1, 32, 64, [] {
              const unsigned t = threadIdx.x;
              if (t < 8) (void)device::load_global(&state[t]);
              if (t == 8) {
                device::store_global(&state[9], 2.0f);
                (void)device::load_global(&state[9]);
                emulation::red_add_f32(&state[9], 1.0f);
              }
              if (t == 9) emulation::cp_async_16(0, state, true);
              if (t == 10) emulation::cp_async_16(16, plain + 4, true);
              if (t == 11) (void)device::load_global(reinterpret_cast<const Pair*>(plain + 2));
              emulation::cp_async_commit();
              emulation::cp_async_wait(0);
            }),
            "");
  EXPECT_EQ(state[9], 3.0f);
}

TEST(Sanitizer, SharedRaceWithoutABarrierIsCaught) {
  // Warp 1 reads rows that threads 0-7 of warp 0 copied in, with no barrier between.
  expect_finding(emulation::launch(1, 1, 64, 128, [] {
                   copy_rows_in();
                   load_rows();
                 }),
                 {"ldmatrix reads shared byte", "accessed with no barrier between them (race)"});
  // The same with __syncthreads between: clean.
  EXPECT_EQ(emulation::launch(1, 1, 64, 128, [] {
              copy_rows_in();
              __syncthreads();
              load_rows();
            }),
            "");
  // Within one warp __syncwarp orders the lanes; without it lane 0's row read by lane 8 races.
  EXPECT_EQ(emulation::launch(1, 1, 32, 128, [] {
              copy_rows_in();
              __syncwarp();
              load_rows();
            }),
            "");
  expect_finding(emulation::launch(1, 1, 32, 128, [] {
                   copy_rows_in();
                   load_rows();
                 }),
                 {"(race)"});
  // A write racing reads: warp 0 reads the rows while thread 40 (warp 1) copies over row 0 with
  // no barrier between. Which of the two is reported first depends on the fiber schedule (here
  // the copy lands while warp 0 waits in its ldmatrix); either names both threads' byte.
  expect_finding(emulation::launch(1, 1, 64, 128, [] {
                   copy_rows_in();
                   __syncthreads();
                   if (threadIdx.x < 32) load_rows();
                   if (threadIdx.x == 40) {
                     emulation::cp_async_16(0, g_source, true);
                     emulation::cp_async_commit();
                     emulation::cp_async_wait(0);
                   }
                 }),
                 {"shared byte 0x0", "thread 40", "(race)"});
}

// A cp.async may write its destination any time from its issue to the wait that retires it (PTX
// ISA): a read another thread makes that does not happen before the issue races with it, even
// when a barrier orders the read before the wait. A pipeline that issues the next load into a
// stage before the barrier that proves its last readers left races so. Checked only at the wait,
// it went unseen (the read was ordered before the wait by the second barrier).
TEST(Sanitizer, ACpAsyncRacesWithReadsNotOrderedBeforeItsIssue) {
  const auto pipeline = [](bool barrier_before_reissue) {
    return emulation::launch(1, 1, 64, 64, [barrier_before_reissue] {
      if (threadIdx.x == 0) {  // the stage's first load
        emulation::cp_async_16(0, g_source, true);
        emulation::cp_async_commit();
        emulation::cp_async_wait(0);
      }
      __syncthreads();
      if (threadIdx.x == 40) emulation::shared_load(0, 4, 4);  // warp 1 reads the stage
      if (barrier_before_reissue) __syncthreads();
      if (threadIdx.x == 0) {  // the stage's next load
        emulation::cp_async_16(0, g_source + 16, true);
        emulation::cp_async_commit();
      }
      __syncthreads();
      if (threadIdx.x == 0) emulation::cp_async_wait(0);
    });
  };
  expect_finding(pipeline(false), {"cp.async lands in shared byte 0x0", "thread 40", "(race)"});
  EXPECT_EQ(pipeline(true), "");
}

// ldmatrix, mma, shfl and vote (.sync.aligned) need every lane of the warp at the same
// instruction: lanes at different ones are a finding. Any 32 arrivals swapped their words before
// (an audit's launch: half a warp at ldmatrix and half at ldmatrix.trans passed, and so did a
// shuffle that met a vote, returning the vote's predicate).
TEST(Sanitizer, LanesOfAWarpAtDifferentCollectivesAreCaught) {
  expect_finding(emulation::launch(1, 1, 32, 128, [] {
                   copy_rows_in();
                   __syncwarp();
                   uint32_t r[4];
                   emulation::ldmatrix_x4(r, 16 * (threadIdx.x % 8), threadIdx.x >= 16);
                 }),
                 {"ldmatrix.sync.aligned.x4", "ldmatrix.sync.aligned.x4.trans", "same warp-collective instruction"});
  expect_finding(emulation::launch(1, 1, 32, 0, [] {
                   if (threadIdx.x < 8) {
                     (void)__shfl_xor_sync(0xffffffffu, 1.0f, 1);
                   } else {
                     (void)__any_sync(0xffffffffu, true);
                   }
                 }),
                 {"shfl.sync.bfly", "vote.sync.any", "same warp-collective instruction"});
  // The same instruction in every lane: clean.
  EXPECT_EQ(emulation::launch(1, 1, 32, 128, [] {
              copy_rows_in();
              __syncwarp();
              load_rows();
              (void)__shfl_xor_sync(0xffffffffu, 1.0f, 1);
            }),
            "");
}

// shfl.bfly takes the lane mask's low five bits (PTX ISA): a mask of 32 is lane ^ 0, the lane's own
// value (it read past the warp's 32 values).
TEST(Sanitizer, AButterflyShuffleTakesTheLowFiveBitsOfItsMask) {
  static float got[32][2];
  EXPECT_EQ(emulation::launch(1, 1, 32, 0, [] {
              const float own = static_cast<float>(threadIdx.x);
              got[threadIdx.x][0] = __shfl_xor_sync(0xffffffffu, own, 32);
              got[threadIdx.x][1] = __shfl_xor_sync(0xffffffffu, own, 33);
            }),
            "");
  for (int l = 0; l < 32; ++l) {
    EXPECT_EQ(got[l][0], static_cast<float>(l)) << "lane " << l;
    EXPECT_EQ(got[l][1], static_cast<float>(l ^ 1)) << "lane " << l;
  }
}

TEST(Sanitizer, ReadOfNeverWrittenSharedMemoryIsCaught) {
  expect_finding(emulation::launch(1, 1, 32, 128, [] { load_rows(); }),
                 {"ldmatrix reads shared byte 0x", ", never written in this CTA"});
  // Written in an earlier CTA does not count: each CTA starts from poison.
  expect_finding(emulation::launch(2, 1, 32, 128, [] {
                   if (blockIdx.x == 0) {
                     copy_rows_in();
                     __syncwarp();
                   }
                   load_rows();
                 }),
                 {"block (1, 0, 0)", "never written in this CTA"});
  // cp.async data read before its wait_group: the copy has not landed.
  expect_finding(emulation::launch(1, 1, 32, 128, [] {
                   const unsigned t = threadIdx.x;
                   if (t < 8) {
                     emulation::cp_async_16(16 * t, g_source + 16 * t, true);
                     emulation::cp_async_commit();
                   }
                   __syncwarp();
                   load_rows();
                   if (t < 8) emulation::cp_async_wait(0);
                 }),
                 {"never written in this CTA"});
  // A plain store is not seen by the shadow, but what it stored is not the poison: clean.
  EXPECT_EQ(emulation::launch(1, 1, 32, 128, [] {
              if (threadIdx.x == 0)
                for (int i = 0; i < 128; ++i) device::shared_storage[i] = static_cast<unsigned char>(i);
              __syncwarp();
              load_rows();
            }),
            "");
}

TEST(Sanitizer, FindingsNameTheKernelLineThatIssuedThem) {
  testing::LaunchBuffers buffers({{g_source, 64}});
  static int line = 0;
  std::string error = emulation::launch(1, 1, 32, 64, [] {
    if (threadIdx.x == 3) {
      line = __LINE__ + 1;
      device::cp_async_16(0, g_source + 64, true);
    }
  });
  expect_finding(error, {"thread 3 of block (0, 0, 0)", "cp.async reads global bytes",
                         "sanitizer_test.cpp:" + std::to_string(line)});
  // A race found when a copy lands names the line of the cp.async, not of the wait.
  static int copy_line = 0;
  error = emulation::launch(1, 1, 64, 128, [] {
    if (threadIdx.x < 32) {
      uint32_t r[4];
      device::ldmatrix_x4(r, 0);
    }
    if (threadIdx.x == 40) {
      copy_line = __LINE__ + 1;
      device::cp_async_16(0, g_source, true);
      device::cp_async_commit();
      device::cp_async_wait<0>();
    }
  });
  expect_finding(error, {"(race)", "sanitizer_test.cpp:"});
}

// Every thread of `order` releases into one phase, then all acquire it: a __syncthreads.
void cta_barrier(emulation::HappensBefore& order, int threads) {
  emulation::SyncClock phase;
  for (int t = 0; t < threads; ++t) order.release(t, phase);
  for (int t = 0; t < threads; ++t) order.acquire(t, phase);
}

// A write must be checked against every thread that read the byte since the last barrier, not
// only the latest reader: here the latest reader is the writer itself.
TEST(Sanitizer, WriteRacingAnEarlierReaderIsCaughtWhenTheWriterReadLast) {
  emulation::SharedShadow shadow;
  emulation::HappensBefore order;
  unsigned char memory[64] = {};
  bool never_written = false;
  auto write = [&](int thread, uint32_t at) {
    return shadow.write(at, 2, thread, order.stamp(thread), order.view(thread), true);
  };
  auto read = [&](int thread, uint32_t at) {
    return shadow.read(at, 2, thread, order.stamp(thread), order.view(thread), memory, &never_written);
  };
  shadow.reset(64);
  order.reset(64);
  EXPECT_TRUE(write(7, 0).none());
  cta_barrier(order, 64);
  EXPECT_TRUE(read(32, 0).none());
  EXPECT_TRUE(read(0, 0).none());
  const emulation::Access other = write(0, 0);  // thread 32's read is unordered with it
  EXPECT_EQ(other.actor, 32);
  // After another barrier both reads happen before the write: clean.
  shadow.reset(64);
  order.reset(64);
  write(7, 0);
  cta_barrier(order, 64);
  read(32, 0);
  read(0, 0);
  cta_barrier(order, 64);
  EXPECT_TRUE(write(0, 0).none());
  // Many readers, then one of them writes: still caught.
  shadow.reset(64);
  order.reset(64);
  for (int t = 0; t < 64; ++t) read(t, 8);
  EXPECT_FALSE(write(63, 8).none());
  EXPECT_FALSE(never_written);
}

// Thread 4 writes bytes 0-3, all five threads meet at a barrier, threads 0-3 read the bytes, then
// thread 4 acquires what `releasers` released and writes them again: the access that second write
// races with, or none.
emulation::Access overwrite_after_reads(std::initializer_list<int> releasers) {
  emulation::SharedShadow shadow;
  emulation::HappensBefore order;
  unsigned char memory[64] = {};
  bool never_written = false;
  shadow.reset(64);
  order.reset(5);
  EXPECT_TRUE(shadow.write(0, 4, 4, order.stamp(4), order.view(4), true).none());
  cta_barrier(order, 5);
  for (int t = 0; t < 4; ++t)
    EXPECT_TRUE(shadow.read(0, 4, t, order.stamp(t), order.view(t), memory, &never_written).none());
  EXPECT_FALSE(never_written);
  emulation::SyncClock phase;
  for (int t : releasers) order.release(t, phase);
  order.acquire(4, phase);
  return shadow.write(0, 4, 4, order.stamp(4), order.view(4), true);
}

// Regression: the shadow kept two of a byte's reads since its write (the latest and one earlier),
// so with three unordered readers a write ordered after the first and the last raced with the
// middle ones unseen. Every reader's latest read counts now, wherever it came in the order.
TEST(Sanitizer, WriteOrderedAfterSomeReadersOnlyRacesWithTheMiddleOne) {
  // Thread 4 waits for threads 0 and 3 only (an mbarrier whose count was two threads short).
  const emulation::Access other = overwrite_after_reads({0, 3});
  ASSERT_FALSE(other.none());
  EXPECT_TRUE(other.actor == 1 || other.actor == 2) << other.actor;
  // Once 1 and 2 release too, the same write is clean.
  EXPECT_TRUE(overwrite_after_reads({0, 1, 2, 3}).none());
}

// A thread's reads count by their latest stamp: an old read the writer is ordered after does not
// hide a newer one it is not, and bytes with other histories are checked on their own.
TEST(Sanitizer, ReaderSetsKeepEachThreadsLatestReadPerByte) {
  emulation::SharedShadow shadow;
  emulation::HappensBefore order;
  unsigned char memory[64] = {};
  bool never_written = false;
  auto read = [&](int thread, uint32_t at, int count) {
    return shadow.read(at, count, thread, order.stamp(thread), order.view(thread), memory, &never_written);
  };
  shadow.reset(64);
  order.reset(3);
  read(0, 0, 16);
  emulation::SyncClock first;
  order.release(0, first);  // thread 0's first read is published ...
  read(0, 0, 16);           // ... its second is not
  read(1, 8, 8);            // bytes 8-15 have a second reader
  order.acquire(2, first);
  const emulation::Access on_low = shadow.write(0, 8, 2, order.stamp(2), order.view(2), true);
  EXPECT_EQ(on_low.actor, 0);
  const emulation::Access on_high = shadow.write(8, 8, 2, order.stamp(2), order.view(2), true);
  EXPECT_TRUE(on_high.actor == 0 || on_high.actor == 1) << on_high.actor;
}

// The numbered sets themselves: a transition is remembered and reused, an older stamp of a member
// adds nothing, and compaction keeps exactly the sets still named, with their members.
TEST(Sanitizer, ReaderSetsShareTransitionsAndCompactToWhatIsNamed) {
  using emulation::Access;
  emulation::ReaderSets sets;
  const uint32_t a = sets.add(emulation::ReaderSets::kEmpty, Access{3, 1});
  EXPECT_EQ(sets.add(emulation::ReaderSets::kEmpty, Access{3, 1}), a);  // remembered
  const uint32_t ab = sets.add(a, Access{5, 2});
  EXPECT_EQ(sets.add(ab, Access{3, 1}), ab);  // thread 3's read at stamp 1 is already there
  const uint32_t ab2 = sets.add(ab, Access{3, 4});
  ASSERT_EQ(sets.members(ab2).size(), 2u);
  EXPECT_EQ(sets.members(ab2)[0].stamp, 4u);
  const size_t before = sets.sets();
  std::vector<uint32_t> named = {ab2, emulation::ReaderSets::kEmpty, ab2, a};
  sets.compact(named);
  EXPECT_EQ(sets.sets(), 3u);  // the empty set, ab2 and a
  EXPECT_LT(sets.sets(), before);
  EXPECT_EQ(named[0], named[2]);
  EXPECT_EQ(named[1], emulation::ReaderSets::kEmpty);
  ASSERT_EQ(sets.members(named[0]).size(), 2u);
  EXPECT_EQ(sets.members(named[0])[1].actor, 5);
  ASSERT_EQ(sets.members(named[3]).size(), 1u);
  EXPECT_EQ(sets.members(named[3])[0].actor, 3);
  EXPECT_EQ(sets.entries(), 3u);
  // After compaction, transitions are derived anew from the renumbered sets.
  const uint32_t grown = sets.add(named[3], Access{7, 1});
  ASSERT_EQ(sets.members(grown).size(), 2u);
  EXPECT_EQ(sets.members(grown)[1].actor, 7);
}

TEST(Sanitizer, FindingsAreCountedAfterTheFirst) {
  const std::string error = emulation::launch(1, 1, 32, 128, [] { load_rows(); });
  EXPECT_NE(error.find("more findings)"), std::string::npos) << error;
}

}  // namespace
}  // namespace cpgen
