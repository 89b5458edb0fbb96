// Plain global loads and stores past the emulated device's buffers (emulated_device.h guard pages,
// emulated_fault.h trap): deliberately broken tiny kernels, run by the test binary's copy of the
// emulator on buffers the device allocated, must fail their launch with the thread, block and
// faulting address; the same kernels within bounds must pass, and a fault outside a launch must
// still kill the process. A real kernel's plain access that no checked wrapper makes would take
// the same path; the step kernels' global accesses outside TMA, cp.async and red.add, the
// key-position searches of mask.cuh among them, go through templates/global_access.cuh and are
// checked before they could reach a guard page
// (EmulatedDevice.AnLseStorePastItsBufferIsAFindingNamingTheLineAndTheBuffer, emulated_ring_test.cpp).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/backend/emulated_device.h"
#include "runtime/backend/emulated_fault.h"

// Last: defines __CUDACC__ and the CUDA keywords.
#include "emulation/cuda_emulation.h"

namespace cpgen {
namespace {

// The test binary's emulator, as a kernel's shared object exports it.
int recover(void* address) { return emulation::recover_from_fault(address) ? 1 : 0; }

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p)));
  return text;
}

// Runs `body` over a grid of 1 x 2 blocks of 64 threads with `buffers` as the launch's buffers,
// under a fault trap, as EmulatedKernel::launch does.
std::string launch_on(const std::vector<const DeviceAllocation*>& buffers, const std::function<void()>& body) {
  std::vector<emulation::GlobalBuffer> table;
  for (const DeviceAllocation* b : buffers) table.push_back({b->data(), b->bytes()});
  emulation::set_global_buffers(table.data(), static_cast<int>(table.size()));
  std::string error;
  {
    EmulatedFaultTrap trap(recover);
    error = emulation::launch(1, 2, 64, 0, body);
  }
  emulation::set_global_buffers(nullptr, 0);
  return error;
}

void expect_report(const std::string& error, const std::vector<std::string>& parts) {
  EXPECT_EQ(error.rfind("sanitizer: ", 0), 0u) << error;
  for (const std::string& part : parts) EXPECT_NE(error.find(part), std::string::npos) << "want '" << part << "' in: " << error;
}

EmulatedDevice& device() {
  static EmulatedDevice d({}, "sm_90");  // no kernels: only its allocations are used
  return d;
}

float* g_out = nullptr;
const float* g_in = nullptr;

TEST(EmulatedFault, PlainStoreOnePastTheOutputBufferIsCaught) {
  DeviceAllocation in = device().allocate(64 * sizeof(float)), out = device().allocate(64 * sizeof(float));
  g_in = in.as<float>();
  g_out = out.as<float>();
  // Each thread copies one element; in block (0, 1) thread 63 writes out[64], one past the end.
  const std::string broken = launch_on({&in, &out}, [] {
    const unsigned i = threadIdx.x + (blockIdx.y == 1 && threadIdx.x == 63 ? 1 : 0);
    g_out[i] = 2.0f;
  });
  expect_report(broken, {"thread 63 of block (0, 1, 0)", "plain access to global address " + hex(g_out + 64),
                         "0 bytes past the end of the 256-byte buffer at " + hex(g_out)});
  // The same kernel in bounds, on the same thread after the recovery: clean, every element written.
  EXPECT_EQ(launch_on({&in, &out}, [] { g_out[threadIdx.x] = 3.0f; }), "");
  for (int i = 0; i < 64; ++i) EXPECT_EQ(g_out[i], 3.0f) << i;
}

TEST(EmulatedFault, PlainLoadPastAnInputBufferIsCaught) {
  // 40 floats: 160 bytes, a multiple of 16, so the element after the last is on the guard page.
  DeviceAllocation in = device().allocate(40 * sizeof(float)), out = device().allocate(64 * sizeof(float));
  g_in = in.as<float>();
  g_out = out.as<float>();
  const std::string broken = launch_on({&in, &out}, [] {
    // Threads 0-39 read inside; thread 41 of block (0, 0) reads in[41] (thread 40 is skipped, so
    // the first faulting access is known).
    if (threadIdx.x < 40 || threadIdx.x == 41) g_out[threadIdx.x] = g_in[threadIdx.x];
  });
  expect_report(broken, {"thread 41 of block (0, 0, 0)", "plain access to global address " + hex(g_in + 41),
                         "4 bytes past the end of the 160-byte buffer at " + hex(g_in)});
}

TEST(EmulatedFault, PlainLoadBeforeAPageSizedBufferIsCaught) {
  // A buffer of whole pages starts right after the front guard page.
  const size_t bytes = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  DeviceAllocation in = device().allocate(bytes);
  g_in = in.as<float>();
  const std::string broken = launch_on({&in}, [] {
    volatile float sink = g_in[static_cast<int>(threadIdx.x) - (blockIdx.y == 1 ? 1 : 0)];
    (void)sink;
  });
  expect_report(broken, {"thread 0 of block (0, 1, 0)", "plain access to global address " + hex(g_in - 1),
                         "4 bytes before the start of the " + std::to_string(bytes) + "-byte buffer at " + hex(g_in)});
}

// A buffer whose size is not a multiple of 16 (9 floats) still ends on its guard page: the first
// float past it faults, where a 16-byte rounding would have hidden it.
TEST(EmulatedFault, OneElementPastAnOddSizedBufferIsCaught) {
  DeviceAllocation nine = device().allocate(9 * sizeof(float));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(nine.data()) % alignof(float), 0u);
  float* out = nine.as<float>();
  EXPECT_EQ(launch_on({&nine}, [out] {
              if (threadIdx.x < 9) out[threadIdx.x] = 1.0f;
            }),
            "");
  expect_report(launch_on({&nine}, [out] {
                  if (threadIdx.x <= 9) out[threadIdx.x] = 1.0f;
                }),
                {"thread 9 of block (0, 0, 0)", "0 bytes past the end of the 36-byte buffer at " + hex(out)});
}

// Ranks run their launches on threads of their own: each thread's fault comes back to its own
// launch, and a clean launch beside them is not disturbed.
TEST(EmulatedFault, FaultsOnSeveralThreadsAreEachReportedToTheirLaunch) {
  constexpr int kThreads = 4;
  std::vector<DeviceAllocation> outs;
  for (int t = 0; t < kThreads; ++t) outs.push_back(device().allocate(static_cast<size_t>(8 * (t + 1)) * sizeof(float)));
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      float* out = outs[static_cast<size_t>(t)].as<float>();
      const unsigned length = 8u * static_cast<unsigned>(t + 1);
      const bool clean = t == 0;
      for (int round = 0; round < 20; ++round)
        errors[static_cast<size_t>(t)] = launch_on({&outs[static_cast<size_t>(t)]}, [out, length, clean] {
          // Thread `length` (past the end) writes only on the faulting threads.
          if (threadIdx.x < length || (!clean && threadIdx.x == length)) out[threadIdx.x] = 1.0f;
        });
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  for (int t = 1; t < kThreads; ++t) {
    const unsigned length = 8u * static_cast<unsigned>(t + 1);
    expect_report(errors[static_cast<size_t>(t)],
                  {"thread " + std::to_string(length) + " of block (0, 0, 0)",
                   "0 bytes past the end of the " + std::to_string(length * 4) + "-byte buffer at " +
                       hex(outs[static_cast<size_t>(t)].data())});
  }
}

TEST(EmulatedFault, TheTrapRestoresThePreviousHandler) {
  struct sigaction before{}, during{}, after{};
  ::sigaction(SIGSEGV, nullptr, &before);
  {
    EmulatedFaultTrap trap(recover);
    ::sigaction(SIGSEGV, nullptr, &during);
  }
  ::sigaction(SIGSEGV, nullptr, &after);
  EXPECT_NE(reinterpret_cast<void*>(during.sa_sigaction), reinterpret_cast<void*>(before.sa_sigaction));
  EXPECT_EQ(reinterpret_cast<void*>(after.sa_sigaction), reinterpret_cast<void*>(before.sa_sigaction));
  // glibc's sigaction adds its own SA_RESTORER flag to every handler it installs, also when it
  // puts back the default; compare the flags a caller sets.
  const int glibc_internal = 0x04000000;
  EXPECT_EQ(after.sa_flags & ~glibc_internal, before.sa_flags & ~glibc_internal);
}

// A fault that is no launch's keeps its normal effect, with a trap live on the thread or not.
TEST(EmulatedFaultDeathTest, AFaultOutsideALaunchStillKillsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DeviceAllocation in = device().allocate(64);
  volatile const unsigned char* past = static_cast<const unsigned char*>(in.data()) + 64;
  EXPECT_EXIT(
      {
        EmulatedFaultTrap trap(recover);
        (void)*past;
      },
      ::testing::KilledBySignal(SIGSEGV), "");
  EXPECT_EXIT((void)*past, ::testing::KilledBySignal(SIGSEGV), "");
}

}  // namespace
}  // namespace cpgen
