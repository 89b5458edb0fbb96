// The generated backward kernels (ring_bwd_pre_..., ring_bwd_...) on a GPU, over rings of 1, 2 and
// 4 zigzag ranks on one device, in the CPU ring's schedule (as step_bwd_emulated_test.cpp runs
// them on the emulator): the preprocessing kernel per rank, then per step each rank's queries
// against the chunk it holds, adding into that chunk's fp32 dK/dV accumulators (written at the
// chunk's first step). Every accumulator is poisoned (NaN) with a poisoned guard past its end.
// dq, dk, dv, rounded to the input dtype, must match the shared float64 vectors with relative
// Frobenius error < 2e-2. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "generator/kernel_spec.h"
#include "ring_step_harness.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/module.h"
#include "runtime/jit/jit.h"
#include "test_util.h"

namespace cpgen {
namespace {

constexpr size_t kGuard = 64;  // poisoned floats past the end of every accumulator

struct Kernel {
  const LoadedKernel* loaded;
  int shared_bytes;
};

Kernel load(const KernelSpec& spec) {
  const std::string arch = device_arch(0);
  const int shared = check_feasibility(spec, arch).shared_bytes;
  const LoadedKernel& k = load_kernel(compile_kernel(spec, arch, nullptr), 0);
  k.reserve_dynamic_shared(shared);
  return {&k, shared};
}

double rel_error(const std::vector<double>& actual, const std::vector<double>& expected) {
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double d = std::isfinite(actual[i]) ? actual[i] - expected[i] : 1e300;
    err2 += d * d;
    ref2 += expected[i] * expected[i];
  }
  return std::sqrt(err2 / std::max(ref2, 1e-300));
}

// Runs the backward ring of `name` over `cp_size` zigzag ranks (1: every position on one rank)
// and checks dq, dk, dv against the vectors.
void check_vector_ring(const std::string& path, Dtype dtype, int cp_size) {
  SCOPED_TRACE(path + " " + std::string(dtype_name(dtype)) + ", " + std::to_string(cp_size) + " ranks");
  testing::AttentionOutput fwd;
  const testing::AttentionProblem p = testing::load_vector_case(path, &fwd);
  const nlohmann::json j = testing::load_json(path);
  const std::vector<double> dout = j.at("dout").get<std::vector<double>>();
  const std::vector<double> want_dq = j.at("dq").get<std::vector<double>>();
  const std::vector<double> want_dk = j.at("dk").get<std::vector<double>>();
  const std::vector<double> want_dv = j.at("dv").get<std::vector<double>>();
  const int B = p.batch, HQ = p.q_heads, HK = p.kv_heads, D = p.head_dim, S = p.seq_len;
  const int pitch = D + testing::kRowPad, n = cp_size;
  std::vector<std::vector<int>> ranks = n > 1 ? testing::zigzag_split(S, n) : std::vector<std::vector<int>>(1);
  if (n == 1)
    for (int i = 0; i < S; ++i) ranks[0].push_back(i);

  const KernelSpec step_spec = KernelSpec::backward_default_for(dtype, D, p.causal, HQ / HK);
  const KernelSpec pre_spec = KernelSpec::backward_pre(dtype, D);
  const Kernel step = load(step_spec), pre = load(pre_spec);
  SCOPED_TRACE(step_spec.uri());

  struct Rank {
    DeviceBuffer q, k, v, out, dout, lse, delta, dq_acc, dk_acc, dv_acc, positions;
    int len = 0;
  };
  std::vector<Rank> rk(n);
  for (int r = 0; r < n; ++r) {
    Rank& x = rk[r];
    x.len = static_cast<int>(ranks[r].size());
    x.q = DeviceBuffer::from_host(0, testing::gather_rows(p.q, B, HQ, S, D, ranks[r], dtype));
    x.out = DeviceBuffer::from_host(0, testing::gather_rows(fwd.out, B, HQ, S, D, ranks[r], dtype));
    x.dout = DeviceBuffer::from_host(0, testing::gather_rows(dout, B, HQ, S, D, ranks[r], dtype));
    x.k = DeviceBuffer::from_host(0, testing::gather_rows(p.k, B, HK, S, D, ranks[r], dtype));
    x.v = DeviceBuffer::from_host(0, testing::gather_rows(p.v, B, HK, S, D, ranks[r], dtype));
    std::vector<float> lse(static_cast<size_t>(B) * HQ * x.len);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < HQ; ++h)
        for (int i = 0; i < x.len; ++i)
          lse[(static_cast<size_t>(b) * HQ + h) * x.len + i] =
              static_cast<float>(fwd.lse[(static_cast<size_t>(b) * HQ + h) * S + ranks[r][i]]);
    x.lse = DeviceBuffer::from_host(0, lse);
    x.positions = DeviceBuffer::from_host(0, ranks[r]);
    x.delta = DeviceBuffer(0, (lse.size() + kGuard) * 4);
    x.dq_acc = DeviceBuffer(0, (lse.size() * D + kGuard) * 4);
    x.dk_acc = DeviceBuffer(0, (static_cast<size_t>(B) * HK * x.len * D + kGuard) * 4);
    x.dv_acc = DeviceBuffer(0, (static_cast<size_t>(B) * HK * x.len * D + kGuard) * 4);
    for (DeviceBuffer* buf : {&x.delta, &x.dq_acc, &x.dk_acc, &x.dv_acc}) buf->poison();

    RingBwdPreParams prm;
    std::memset(&prm, 0, sizeof prm);
    prm.out = x.out.as<void>();
    prm.dout = x.dout.as<void>();
    prm.delta = x.delta.as<float>();
    prm.dq_acc = x.dq_acc.as<float>();
    prm.out_row_stride = prm.dout_row_stride = pitch;
    prm.out_head_stride = prm.dout_head_stride = static_cast<int64_t>(x.len) * pitch;
    prm.out_batch_stride = prm.dout_batch_stride = prm.out_head_stride * HQ;
    prm.batch = B;
    prm.q_heads = HQ;
    prm.q_len = x.len;
    LaunchShape shape;
    shape.grid[0] = static_cast<unsigned>((B * HQ * x.len + pre_spec.warps - 1) / pre_spec.warps);
    shape.block[0] = static_cast<unsigned>(pre_spec.threads());
    pre.loaded->launch(prm, shape);
  }
  for (int s = 0; s < n; ++s)
    for (int r = 0; r < n; ++r) {
      const int src = ((r - s) % n + n) % n;
      Rank& mine = rk[r];
      Rank& chunk = rk[src];
      RingBwdParams prm;
      std::memset(&prm, 0, sizeof prm);
      prm.q = mine.q.as<void>();
      prm.dout = mine.dout.as<void>();
      prm.k = chunk.k.as<void>();
      prm.v = chunk.v.as<void>();
      prm.lse = mine.lse.as<float>();
      prm.delta = mine.delta.as<float>();
      prm.dq_acc = mine.dq_acc.as<float>();
      prm.dk_acc = chunk.dk_acc.as<float>();
      prm.dv_acc = chunk.dv_acc.as<float>();
      prm.q_positions = mine.positions.as<int>();
      prm.kv_positions = chunk.positions.as<int>();
      prm.q_row_stride = prm.dout_row_stride = prm.k_row_stride = prm.v_row_stride = pitch;
      prm.q_head_stride = prm.dout_head_stride = static_cast<int64_t>(mine.len) * pitch;
      prm.q_batch_stride = prm.dout_batch_stride = prm.q_head_stride * HQ;
      prm.k_head_stride = prm.v_head_stride = static_cast<int64_t>(chunk.len) * pitch;
      prm.k_batch_stride = prm.v_batch_stride = prm.k_head_stride * HK;
      prm.batch = B;
      prm.q_heads = HQ;
      prm.kv_heads = HK;
      prm.q_len = mine.len;
      prm.kv_len = chunk.len;
      prm.scale = static_cast<float>(p.softmax_scale);
      prm.scale_log2 = static_cast<float>(p.softmax_scale * 1.4426950408889634);
      prm.accumulate_dkv = s > 0;
      LaunchShape shape;
      shape.grid[0] = static_cast<unsigned>((chunk.len + step_spec.block_n - 1) / step_spec.block_n);
      shape.grid[1] = static_cast<unsigned>(B * HK);
      shape.block[0] = static_cast<unsigned>(step_spec.threads());
      shape.dynamic_shared_bytes = step.shared_bytes;
      step.loaded->launch(prm, shape);
    }
  use_primary_context(0);
  CPGEN_CU_CHECK(cu::driver().cuCtxSynchronize());

  std::vector<double> dq(want_dq.size(), NAN), dk(want_dk.size(), NAN), dv(want_dv.size(), NAN);
  auto place = [&](const DeviceBuffer& acc, int heads, const std::vector<int>& positions, std::vector<double>* full,
                   const char* what) {
    const std::vector<float> host = acc.download_as<float>();
    const size_t rows = positions.size(), used = static_cast<size_t>(B) * heads * rows * D;
    for (size_t i = used; i < host.size(); ++i) ASSERT_TRUE(std::isnan(host[i])) << what << " guard " << i - used << " written";
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < heads; ++h)
        for (size_t r = 0; r < rows; ++r)
          for (int d = 0; d < D; ++d) {
            const float value = host[((static_cast<size_t>(b) * heads + h) * rows + r) * D + d];
            ASSERT_TRUE(std::isfinite(value)) << what << "[b" << b << " h" << h << " pos " << positions[r] << " d" << d
                                              << "] = " << value;
            (*full)[((static_cast<size_t>(b) * heads + h) * S + positions[r]) * D + d] =
                testing::from_bits(testing::to_bits(value, dtype), dtype);
          }
  };
  for (int r = 0; r < n; ++r) {
    place(rk[r].dq_acc, HQ, ranks[r], &dq, "dq");
    place(rk[r].dk_acc, HK, ranks[r], &dk, "dk");
    place(rk[r].dv_acc, HK, ranks[r], &dv, "dv");
  }
  EXPECT_LT(rel_error(dq, want_dq), 2e-2);
  EXPECT_LT(rel_error(dk, want_dk), 2e-2);
  EXPECT_LT(rel_error(dv, want_dv), 2e-2);
}

// Every format-1 case of every vectors set (the in-repo one and the independent ones present),
// except sliding-window cases: this test launches the plain kernel, and a window needs the
// key-interval one with its tables, which the ring runs on every format-2 file (windows and
// documents) in gpu_ring_backward_test.cpp. One test per dtype and
// ring size, so that ctest runs them side by side: as one test it took 81 s on the H200
// (2026-11-27) and finished last, 60 s after the rest of the suite.
class StepBwdGpu : public ::testing::TestWithParam<std::tuple<Dtype, int>> {};

TEST_P(StepBwdGpu, RingMatchesTheVectors) {
  CPGEN_REQUIRE_GPU();
  const auto [dtype, n] = GetParam();
  for (const std::string& path : testing::vector_files()) {
    const nlohmann::json j = testing::load_json(path);
    if (!j.at("window").is_null()) continue;
    if (j.at("seq_len").get<int>() % (2 * n) == 0) check_vector_ring(path, dtype, n);
  }
}

std::string ring_case_name(const ::testing::TestParamInfo<StepBwdGpu::ParamType>& info) {
  const auto [dtype, n] = info.param;
  return std::string(dtype_name(dtype)) + "_ring" + std::to_string(n);
}

INSTANTIATE_TEST_SUITE_P(DtypesAndRingSizes, StepBwdGpu,
                         ::testing::Combine(::testing::ValuesIn(kSupportedDtypes), ::testing::Values(1, 2, 4)),
                         ring_case_name);

}  // namespace
}  // namespace cpgen
