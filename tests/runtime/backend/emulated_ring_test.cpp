// The emulated backend (runtime/backend/emulated_ring.h, emulated_device.h): generated kernels
// compiled for the host and run by the CUDA emulator under KernelRingBackend, ranks on threads.
// Checked against the float64 vectors and reference with the GPU backend's tolerances; outputs
// start as NaN, so an element no kernel wrote fails. Coverage: the default forward kernel of every
// (dtype, head dim, mask, GQA group 1 or 4) on a small zigzag ring, and a sample of other tiles.
// Kernels are kept in a store in the build folder, so only the first run compiles them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cpgen/error.h"
#include "runtime/backend/emulated_device.h"
#include "runtime/backend/emulated_ring.h"
#include "runtime/backend/kernel_ring_backend.h"
#include "runtime/ring/reference.h"
#include "runtime/ring/sampled_check.h"
#include "runtime/ring/vectors.h"
#include "tests/runtime/backend/emulated_test_util.h"
#include "test_util.h"

namespace cpgen {
namespace {

constexpr const char* kArch = testing::kEmulatedArch;
KernelStore* test_store() { return testing::emulated_store(); }

std::vector<std::pair<StepType, KernelSpec>> defaults_for(const Problem& p) {
  std::vector<std::pair<StepType, KernelSpec>> per_step;
  for (StepType step : step_types_for(p))
    per_step.emplace_back(step, KernelSpec::default_for_arch(p.dtype, static_cast<int>(p.head_dim), p.causal,
                                                             static_cast<int>(p.gqa_group()), kArch));
  return per_step;
}

struct Errors {
  double out_relative = 0, lse_max_abs = 0;
};

// NaN anywhere (an unwritten element) makes both errors NaN, which fails every bound.
Errors errors(const std::vector<float>& out, const std::vector<float>& lse, const std::vector<double>& want_out,
              const std::vector<double>& want_lse) {
  Errors e;
  double diff = 0, ref = 0;
  EXPECT_EQ(out.size(), want_out.size());
  EXPECT_EQ(lse.size(), want_lse.size());
  for (size_t i = 0; i < out.size() && i < want_out.size(); ++i) {
    diff += (out[i] - want_out[i]) * (out[i] - want_out[i]);
    ref += want_out[i] * want_out[i];
  }
  e.out_relative = std::sqrt(diff / ref);
  for (size_t i = 0; i < lse.size() && i < want_lse.size(); ++i)
    e.lse_max_abs = std::isnan(lse[i]) ? NAN : std::max(e.lse_max_abs, std::abs(lse[i] - want_lse[i]));
  return e;
}

using testing::as_float;

// A random problem's ring on the emulator against the float64 reference of the whole sequence.
void check_random(const Problem& p, const std::vector<std::pair<StepType, KernelSpec>>& per_step, uint64_t seed) {
  const AttentionVectors vec = random_vectors(p, seed);
  std::vector<int64_t> positions(static_cast<size_t>(p.seq_len));
  for (int64_t i = 0; i < p.seq_len; ++i) positions[static_cast<size_t>(i)] = i;
  const ReferenceForward want = reference_forward(vec.shape, vec.q, vec.k, vec.v, positions, positions);
  const EmulatedRingResult got =
      run_emulated_ring(p, per_step, kArch, as_float(vec.q), as_float(vec.k), as_float(vec.v), test_store());
  EXPECT_EQ(got.launches, p.cp_size * p.cp_size);
  const Errors e = errors(got.out, got.lse, want.out, want.lse);
  testing::expect_within_limit(e.out_relative, p.dtype, per_step.front().second.uri() + " out", testing::kOutputUlps);
  testing::expect_within_limit(e.lse_max_abs, p.dtype, per_step.front().second.uri() + " lse");
}

Problem small_problem(Dtype dtype, int head_dim, bool causal, int group) {
  Problem p;
  p.name = "emulated";
  p.batch = 1;
  p.kv_heads = 1;
  p.q_heads = group;
  p.head_dim = head_dim;
  p.seq_len = 2 * 2 * 12;  // zigzag over 2 ranks: chunks of 12 rows, partial tiles everywhere
  p.cp_size = 2;
  p.dtype = dtype;
  p.causal = causal;
  p.scheme = Scheme::kZigzag;
  return p;
}

TEST(EmulatedRing, ReproducesTheVectorsOverAZigzagRing) {
  const AttentionVectors vec = load_attention_vectors(testing::vectors_dir() + "/gqa4_causal_hd64_s32.json");
  const Problem p = problem_from_vectors(vec, 2, Scheme::kZigzag, Dtype::kBf16);
  const EmulatedRingResult got =
      run_emulated_ring(p, defaults_for(p), kArch, as_float(vec.q), as_float(vec.k), as_float(vec.v), test_store());
  const Errors e = errors(got.out, got.lse, vec.out, vec.lse);
  testing::expect_within_limit(e.out_relative, p.dtype, vec.name + " out", testing::kOutputUlps);
  testing::expect_within_limit(e.lse_max_abs, p.dtype, vec.name + " lse");
  EXPECT_EQ(got.launches, 4);
  EXPECT_TRUE(got.dq.empty()) << "no backward was asked for";
}

// (dtype, head dim) per case; each runs causal and full at GQA groups 1 and 4.
class EmulatedDefaults : public ::testing::TestWithParam<std::tuple<Dtype, int>> {};

TEST_P(EmulatedDefaults, DefaultForwardKernelOfEveryMaskAndGroup) {
  const auto [dtype, head_dim] = GetParam();
  uint64_t seed = 100 + static_cast<uint64_t>(head_dim);
  for (bool causal : {true, false})
    for (int group : {1, 4}) {
      const Problem p = small_problem(dtype, head_dim, causal, group);
      SCOPED_TRACE(std::string(causal ? "causal" : "full") + " group " + std::to_string(group));
      check_random(p, defaults_for(p), seed++);
    }
}

INSTANTIATE_TEST_SUITE_P(EveryDtypeAndHeadDim, EmulatedDefaults,
                         ::testing::Combine(::testing::Values(Dtype::kBf16, Dtype::kFp16),
                                            ::testing::ValuesIn(kSupportedHeadDims)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_hd" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Tiles other than the defaults: one-stage and three-stage pipelines, 32-key tiles, eight warps,
// and different kernels for the diagonal and the zigzag half steps of one ring.
TEST(EmulatedRing, NonDefaultTilesAndAKernelPerStepType) {
  Problem p = small_problem(Dtype::kBf16, 64, true, 4);
  const KernelSpec three_stages = KernelSpec::parse("ring_fwd_bf16_hd64_causal_gqa4_bm64_bn32_w2_s3");
  const KernelSpec eight_warps = KernelSpec::parse("ring_fwd_bf16_hd64_causal_gqa4_bm128_bn64_w8_s1");
  check_random(p, {{StepType::kDiagonal, three_stages}}, 7);
  check_random(p, {{StepType::kDiagonal, eight_warps},
                   {StepType::kZigzagKvHalf, three_stages},
                   {StepType::kZigzagQHalf, KernelSpec::default_for_arch(Dtype::kBf16, 64, true, 4, kArch)}},
               8);
  Problem full = small_problem(Dtype::kFp16, 128, false, 1);
  check_random(full, {{StepType::kFull, KernelSpec::parse("ring_fwd_fp16_hd128_full_gqa1_bm64_bn32_w4_s2")}}, 9);
}

TEST(EmulatedDevice, RefusesABackwardLaunchWithoutBackwardKernels) {
  const Problem p = small_problem(Dtype::kBf16, 64, false, 1);
  EmulatedDevice device(defaults_for(p), kArch, test_store());
  try {
    device.launch_backward_pre(RingBwdPreParams{});
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("backward not available on the emulated backend"), std::string::npos)
        << e.what();
  }
}

// The device hands its allocations to the emulator's sanitizer: a launch whose params claim more
// keys than the K/V slots hold reads past them, and fails naming the thread and the access.
TEST(EmulatedDevice, SanitizerCatchesAKeyLengthPastTheBuffers) {
  const Problem p = small_problem(Dtype::kBf16, 64, false, 1);
  EmulatedDevice device(defaults_for(p), kArch, test_store());
  const RingPositions positions(p, device);
  KernelRingBackend backend(p, 0, device, positions);
  const size_t q_bytes = static_cast<size_t>(p.batch * p.q_heads * p.local_seq_len() * p.head_dim) * 2;
  DeviceAllocation q = device.allocate(q_bytes), k = device.allocate(q_bytes), v = device.allocate(q_bytes),
                   out = device.allocate(q_bytes),
                   lse = device.allocate(static_cast<size_t>(p.batch * p.q_heads * p.local_seq_len()) * 4);
  for (const DeviceAllocation* a : {&q, &k, &v}) std::memset(a->data(), 0, a->bytes());
  backend.bind({q.data(), k.data(), v.data(), out.data(), lse.as<float>()});
  backend.forward_begin();
  RingStep step;
  step.is_first = step.is_last = true;
  RingFwdParams params = backend.step_params(step);
  device.launch_forward(StepType::kFull, params);  // as the ring runs it: clean
  params.kv_len *= 4;
  try {
    device.launch_forward(StepType::kFull, params);
    FAIL() << "no finding";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("sanitizer: thread "), std::string::npos) << what;
    EXPECT_NE(what.find("cp.async reads global bytes"), std::string::npos) << what;
    EXPECT_NE(what.find(KernelSpec::default_for_arch(Dtype::kBf16, 64, false, 1, kArch).uri()), std::string::npos) << what;
  }
}

// Each step launches the shape its step type was tuned at (workload_for): a zigzag key-half step
// covers the first half of the chunk only, the diagonal step the whole chunk, and the query-half
// step, which is the last step of a ring of 2 and must write every row's out and lse, all queries
// (emulated_ring_layout_test.cpp checks the query-half view of a longer ring).
TEST(EmulatedRing, ZigzagKeyHalfStepLaunchesHalfTheKeys) {
  const Problem p = small_problem(Dtype::kBf16, 64, true, 1);
  ASSERT_EQ(p.cp_size, 2);
  EmulatedDevice device(defaults_for(p), kArch, test_store());
  const RingPositions positions(p, device);
  const int64_t local = p.local_seq_len();
  for (int rank = 0; rank < 2; ++rank) {
    KernelRingBackend backend(p, rank, device, positions);
    for (int s = 0; s < 2; ++s) {
      RingStep step;
      step.step = s;
      step.kv_slot = s % 2;
      step.kv_rank = (rank - s + 2) % 2;
      step.is_first = s == 0;
      step.is_last = s == 1;
      const StepType type = step_type_at(p, rank, s);
      const RingFwdParams params = backend.step_params(step);
      EXPECT_EQ(params.q_len, local);
      EXPECT_EQ(params.kv_len, type == StepType::kZigzagKvHalf ? local / 2 : local)
          << "rank " << rank << " step " << s << " " << step_type_name(type);
      EXPECT_EQ(params.kv_len, workload_for(p, type, DeviceClass{}).kv_len) << step_type_name(type);
    }
  }
}

// Rank 0 of `p` on an emulated device with its default kernels, bound to Q, K, V (zeros), out and
// lse the device allocated, its forward begun: single steps launched by hand, as the ring would.
struct OneRankForward {
  explicit OneRankForward(const Problem& problem)
      : p(problem), device(defaults_for(p), kArch, test_store()), positions(p, device), backend(p, 0, device, positions) {
    for (DeviceAllocation* a : {&q, &k, &v, &out}) *a = device.allocate(q_bytes());
    lse = device.allocate(lse_bytes());
    for (const DeviceAllocation* a : {&q, &k, &v}) std::memset(a->data(), 0, a->bytes());
    backend.bind({q.data(), k.data(), v.data(), out.data(), lse.as<float>()});
    backend.forward_begin();
  }
  size_t q_bytes() const { return static_cast<size_t>(p.batch * p.q_heads * p.local_seq_len() * p.head_dim) * 2; }
  size_t lse_bytes() const { return static_cast<size_t>(p.batch * p.q_heads * p.local_seq_len()) * 4; }
  // The params of step 0 as a first, middle or last step.
  RingFwdParams step_params(bool first, bool last) {
    RingStep step;
    step.is_first = first;
    step.is_last = last;
    return backend.step_params(step);
  }

  const Problem p;
  EmulatedDevice device;
  const RingPositions positions;
  KernelRingBackend backend;
  DeviceAllocation q, k, v, out, lse;
};

// `launch` fails with a sanitizer finding that holds every one of `parts`.
void expect_launch_finding(const std::function<void()>& launch, const std::vector<std::string>& parts) {
  try {
    launch();
    FAIL() << "no finding";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("sanitizer: thread "), std::string::npos) << what;
    for (const std::string& part : parts) EXPECT_NE(what.find(part), std::string::npos) << "want '" << part << "' in: " << what;
  }
}

// The stores of a real kernel: lse given a buffer four rows short, the last step's lse stores of
// those rows fall outside every buffer the device allocated; the sanitizer fails the launch naming
// the store's kernel line and the buffer it ran past (before the store could reach the guard page
// after it, which still backs the accesses no checked wrapper makes).
TEST(EmulatedDevice, AnLseStorePastItsBufferIsAFindingNamingTheLineAndTheBuffer) {
  OneRankForward rank(small_problem(Dtype::kBf16, 64, false, 1));
  RingFwdParams params = rank.step_params(true, true);
  rank.device.launch_forward(StepType::kFull, params);  // as the ring runs it: clean
  const DeviceAllocation short_lse = rank.device.allocate(rank.lse_bytes() - 16);
  params.lse = short_lse.as<float>();
  char start[32];
  std::snprintf(start, sizeof start, "0x%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(short_lse.data())));
  expect_launch_finding([&] { rank.device.launch_forward(StepType::kFull, params); },
                        {"a global store writes global bytes [0x", "at cpgen/step_fwd.cuh:",
                         "bytes past the end of the " + std::to_string(rank.lse_bytes() - 16) + "-byte buffer at " + start});
  // The device and the thread go on: the ring's own launch still runs clean.
  params.lse = rank.lse.as<float>();
  rank.device.launch_forward(StepType::kFull, params);
}

// Reads of a real kernel: a middle step launched before any first step wrote the running state
// merges into a state that holds only the allocation's fill; the sanitizer fails the launch
// naming the load's kernel line (compute-sanitizer initcheck's uninitialized read). After the
// first step has written the state, the same middle step runs clean.
TEST(EmulatedDevice, AMiddleStepOnAStateNothingWroteIsAnUninitializedRead) {
  OneRankForward rank(small_problem(Dtype::kBf16, 64, false, 1));
  const RingFwdParams middle = rank.step_params(false, false);
  expect_launch_finding([&] { rank.device.launch_forward(StepType::kFull, middle); },
                        {"a global load reads global bytes [0x", "nothing wrote them (uninitialized read)",
                         "at cpgen/step_fwd.cuh:"});
  rank.device.launch_forward(StepType::kFull, rank.step_params(true, false));
  rank.device.launch_forward(StepType::kFull, middle);
}

// The causal tile search reads the key positions through load_global (mask.cuh, ArrayAt): a
// positions table nothing wrote is a finding at that search's line, not a silently wrong range.
TEST(EmulatedDevice, AKeyPositionTableNothingWroteIsAnUninitializedReadOfTheTileSearch) {
  OneRankForward rank(small_problem(Dtype::kBf16, 64, true, 1));
  RingFwdParams params = rank.step_params(true, true);
  rank.device.launch_forward(StepType::kDiagonal, params);  // as the ring runs it: clean
  const DeviceAllocation unwritten = rank.device.allocate(static_cast<size_t>(params.kv_len) * sizeof(int));
  params.kv_positions = unwritten.as<int>();
  expect_launch_finding([&] { rank.device.launch_forward(StepType::kDiagonal, params); },
                        {"a global load reads global bytes [0x", "nothing wrote them (uninitialized read) at cpgen/mask.cuh:"});
}

TEST(EmulatedDevice, RefusesAKernelOfTheWrongDirectionForAStepType) {
  const KernelSpec forward = KernelSpec::default_for(Dtype::kBf16, 64, true, 1);
  EXPECT_THROW(EmulatedDevice({{StepType::kBwdDiagonal, forward}}, kArch, test_store()), Error);
}

// The sm_90a wgmma family (issue 13) runs on the emulated device for sm_90a only (the arch whose
// feasibility the device checks), and launches over views of the queries (half-size zigzag query
// steps) like the mma.sync family. Its rings are checked in emulated_ring_wgmma_test.cpp; this
// spec is the one compiled there.
TEST(EmulatedDevice, TakesAWgmmaKernelOnSm90aAndRunsQueryViewsWithIt) {
  const KernelSpec wgmma = KernelSpec::parse("ring_fwd_wgmma_bf16_hd64_causal_gqa1_bm64_bn64_c1_s2");
  try {
    EmulatedDevice device({{StepType::kDiagonal, wgmma}}, kArch, test_store());
    FAIL() << "a wgmma kernel on " << kArch << " must be infeasible";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInfeasible) << e.what();
    EXPECT_NE(std::string(e.what()).find("sm_90a only"), std::string::npos) << e.what();
  }
  try {
    const EmulatedDevice device({{StepType::kDiagonal, wgmma}}, "sm_90a", test_store());
    EXPECT_EQ(device.spec(StepType::kZigzagQHalf), wgmma);
    EXPECT_TRUE(device.forward_takes_query_view(StepType::kZigzagQHalf))
        << "the wgmma kernel writes the state at state_len's pitch";
  } catch (const Error& e) {
    FAIL() << e.what();
  }
}

TEST(EmulatedDevice, RefusesAnInfeasibleKernelBeforeCompiling) {
  // 256-row tiles of head dim 256 in four stages need far more shared memory than an H100 has.
  const KernelSpec huge = KernelSpec::parse("ring_fwd_bf16_hd256_causal_gqa1_bm256_bn256_w16_s4");
  try {
    EmulatedDevice device({{StepType::kDiagonal, huge}}, kArch, test_store());
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInfeasible) << e.what();
  }
}

}  // namespace
}  // namespace cpgen
