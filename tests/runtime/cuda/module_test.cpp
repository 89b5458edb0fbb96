// Loading cubins and launching through the driver API. The GPU tests use a probe kernel of their
// own (not the generated step kernel) so that they check the loader and launcher alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cpgen/error.h"
#include "generator/kernel_spec.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/jit/jit.h"
#include "runtime/cuda/module.h"
#include "test_util.h"

namespace cpgen {
namespace {

const std::string kProbe = "cpgen_module_probe";

// Every thread stages values across the whole dynamic shared allocation (kv_len floats), then
// reads back an entry another thread wrote, so a launch without the requested shared memory
// faults or reads garbage. Row r of block b gets staged[n - 1 - t] + b = (n - 1 - t) * s + b.
const std::string kProbeSource = R"(#include "cpgen/params.cuh"
extern "C" __global__ void cpgen_module_probe(cpgen::RingFwdParams p) {
  extern __shared__ float staged[];
  const int n = p.kv_len;
  for (int i = threadIdx.x; i < n; i += blockDim.x) staged[i] = float(i) * p.scale_log2;
  __syncthreads();
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < p.q_len) p.lse[row] = staged[n - 1 - threadIdx.x] + float(blockIdx.x);
}
)";

CompiledKernel probe_for_device(int device) {
  return compile_source(kProbe, kProbeSource, device_arch(device), nullptr);
}

TEST(Module, ProbeKernelCompilesForEveryArchWithoutAGpu) {
  // Keeps the GPU tests below honest on machines that skip them: their kernel compiles.
  for (std::string_view arch : kSupportedArchs) {
    CompiledKernel k = compile_source(kProbe, kProbeSource, arch, nullptr);
    EXPECT_EQ(k.stats.spill_bytes, 0) << arch;
    EXPECT_GT(k.stats.registers, 0) << arch;
  }
}

TEST(Module, LoadIsOncePerProcessAndDevice) {
  CPGEN_REQUIRE_GPU();
  CompiledKernel k = probe_for_device(0);
  const LoadedKernel& a = load_kernel(k, 0);
  const LoadedKernel& b = load_kernel(k, 0);
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(a.uri(), kProbe);
  EXPECT_EQ(a.registers(), k.stats.registers) << "driver and ptxas disagree on registers";
}

TEST(Module, LaunchWithMoreThan48KBOfDynamicSharedMemoryWritesEveryRow) {
  CPGEN_REQUIRE_GPU();
  const LoadedKernel& kernel = load_kernel(probe_for_device(0), 0);
  const int rows = 1000;             // not a multiple of the block: the tail must stay untouched
  const int padded = 1024;
  const int shared_floats = 24 * 1024;  // 96 KB, above the 48 KB default
  DeviceBuffer lse(0, padded * sizeof(float));
  lse.poison();
  RingFwdParams p;
  std::memset(&p, 0, sizeof p);
  p.lse = lse.as<float>();
  p.q_len = rows;
  p.kv_len = shared_floats;
  p.scale_log2 = 0.5f;
  LaunchShape shape;
  shape.grid[0] = padded / 128;
  shape.block[0] = 128;
  shape.dynamic_shared_bytes = shared_floats * static_cast<int>(sizeof(float));
  kernel.launch(p, shape);
  use_primary_context(0);
  CPGEN_CU_CHECK(cu::driver().cuCtxSynchronize());
  std::vector<float> got = lse.download_as<float>();
  for (int r = 0; r < padded; ++r) {
    if (r < rows) {
      const int t = r % 128, b = r / 128;
      const float expected = static_cast<float>(shared_floats - 1 - t) * 0.5f + static_cast<float>(b);
      ASSERT_EQ(got[r], expected) << "row " << r << " of " << kProbe;
    } else {
      ASSERT_TRUE(std::isnan(got[r])) << "row " << r << " past q_len was written: " << got[r];
    }
  }
}

TEST(Module, SharedMemoryBeyondTheDeviceLimitIsInfeasible) {
  CPGEN_REQUIRE_GPU();
  const LoadedKernel& kernel = load_kernel(probe_for_device(0), 0);
  try {
    kernel.reserve_dynamic_shared(1 << 20);
    FAIL() << "1 MB of shared memory was granted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInfeasible);
    EXPECT_NE(std::string(e.what()).find(kProbe), std::string::npos) << e.what();
  }
}

TEST(Module, CubinForAnotherArchIsACudaErrorNamingTheKernel) {
  CPGEN_REQUIRE_GPU();
  // SASS does not run across major architectures: an sm_80 cubin cannot load on Hopper, and an
  // sm_90a one cannot load on Ampere.
  const std::string other = device_arch(0) == "sm_80" ? "sm_90a" : "sm_80";
  CompiledKernel k = compile_source(kProbe, kProbeSource, other, nullptr);
  try {
    load_kernel(k, 0);
    FAIL() << "an " << other << " cubin loaded on a " << device_arch(0) << " device";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCuda);
    EXPECT_NE(std::string(e.what()).find(kProbe), std::string::npos) << e.what();
  }
}

TEST(Module, GeneratedDefaultKernelLoadsAndExposesItsUri) {
  CPGEN_REQUIRE_GPU();
  KernelSpec spec = KernelSpec::default_for(Dtype::kBf16, 128, true, 1);
  CompiledKernel k = compile_kernel(spec, device_arch(0), nullptr);
  const LoadedKernel& loaded = load_kernel(k, 0);
  EXPECT_EQ(loaded.uri(), spec.uri());
  EXPECT_GE(loaded.max_threads_per_block(), spec.threads());
}

TEST(Module, WithoutAGpuLoadingIsNoDevice) {
  if (testing::have_gpu()) GTEST_SKIP() << "a GPU is present; this checks the no-GPU path";
  CompiledKernel k = compile_source(kProbe, "extern \"C\" __global__ void cpgen_module_probe() {}\n", "sm_90", nullptr);
  try {
    load_kernel(k, 0);
    FAIL() << "loaded a kernel without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNoDevice);
  }
  try {
    DeviceBuffer buffer(0, 16);
    FAIL() << "allocated device memory without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNoDevice);
  }
}

}  // namespace
}  // namespace cpgen
