#include "cache_fixtures.h"

#include <unistd.h>

#include "generator/kernel_spec.h"

namespace cpgen::testing {

void TempDirTest::SetUp() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  dir_ = std::filesystem::temp_directory_path() /
         ("cpgen_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
}

void TempDirTest::TearDown() {
  if (!HasFailure()) std::filesystem::remove_all(dir_);
}

Environment test_env(const std::string& driver) {
  Environment e;
  e.cpgen_version = "0.1.0";
  e.template_hash = "00112233aabbccdd";
  e.nvrtc_version = "13.0";
  e.driver_version = driver;
  e.gpu_name = "NVIDIA H200";
  e.sm_count = 132;
  return e;
}

WorkloadKey test_workload(int64_t q_len, StepType step) {
  WorkloadKey w;
  w.dtype = Dtype::kBf16;
  w.head_dim = 128;
  w.q_heads = 32;
  w.kv_heads = 8;
  w.causal = true;
  w.batch = 1;
  w.q_len = q_len;
  w.kv_len = step == StepType::kZigzagKvHalf ? q_len / 2 : q_len;
  w.scheme = Scheme::kZigzag;
  w.step = step;
  w.gpu_name = "NVIDIA H200";
  w.arch = "sm_90a";
  w.sm_count = 132;
  return w;
}

Record test_record(const WorkloadKey& w, int bm, int bn, int warps, int stages, double ms, Disposition failed,
                   const Environment& env) {
  KernelSpec s = KernelSpec::default_for(w.dtype, w.head_dim, w.causal, w.gqa_group());
  s.block_m = bm;
  s.block_n = bn;
  s.warps = warps;
  s.stages = stages;
  Record r;
  r.workload = w;
  r.kernel_uri = s.uri();
  r.env = env.for_kernel(r.kernel_uri);  // as the tuner stamps it (a fixed test_env unchanged)
  r.created_at = 1763700000;
  if (ms > 0) {
    r.disposition = Disposition::kOk;
    r.median_ms = ms;
    r.spread_ms = ms * 0.01;
    r.samples_ms = {ms * 0.99, ms, ms * 1.01};
    r.tflops = 123.25;
    r.registers = 168;
    r.spill_bytes = 0;
  } else {
    r.disposition = failed;
    r.detail = "test failure";
  }
  return r;
}

}  // namespace cpgen::testing
