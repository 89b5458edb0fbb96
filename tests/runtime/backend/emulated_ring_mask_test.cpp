// The forward ring of the emulated backend on masked problems (issue 11): packed documents,
// sliding windows (left only, and two-sided without causality) and the logit softcap, each run by
// the kernels specialized on them (_ivl, _cap) against the float64 reference of the whole
// sequence. Outputs start as NaN (run_emulated_ring), so an element no kernel wrote fails. Four
// kernels in all (a host compile each on a clean clone), with small tiles so that a shard spans
// several query blocks and key tiles. And, with the emulator counting the cp.async reads of every
// buffer, that what the masks skip is never loaded: key tiles no row of a query block sees, the Q
// rows of a block that sees nothing, and whole ring steps whose chunk no local query sees.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/backend/emulated_device.h"
#include "runtime/backend/emulated_ring.h"
#include "runtime/backend/kernel_ring_backend.h"
#include "runtime/core/attention_shape.h"
#include "runtime/core/half_convert.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/reference.h"
#include "runtime/ring/sampled_check.h"
#include "runtime/ring/schedule.h"
#include "runtime/ring/vectors.h"
#include "runtime/transport/cpu_transport.h"
#include "tests/runtime/backend/emulated_test_util.h"
#include "test_util.h"

namespace cpgen {
namespace {

constexpr const char* kArch = testing::kEmulatedArch;
constexpr int kHeadDim = 64;
KernelStore* test_store() { return testing::emulated_store(); }

// 32 x 32 tiles on two warps: a 64-row shard is two query blocks and two key tiles.
KernelSpec small_spec(Dtype dtype, bool causal, bool intervals, bool softcap) {
  KernelSpec s = KernelSpec::default_for_arch(dtype, kHeadDim, causal, 1, kArch);
  s.block_m = 32;
  s.block_n = 32;
  s.warps = 2;
  s.stages = 2;
  s.key_intervals = intervals;
  s.softcap = softcap;
  return s;
}

Problem masked_problem(Dtype dtype, Scheme scheme, int cp_size, int64_t seq_len, bool causal) {
  Problem p;
  p.name = "masked";
  p.batch = 1;
  p.q_heads = 1;
  p.kv_heads = 1;
  p.head_dim = kHeadDim;
  p.seq_len = seq_len;
  p.cp_size = cp_size;
  p.dtype = dtype;
  p.causal = causal;
  p.scheme = scheme;
  return p;
}

// Whether some query of q_rank sees some key of kv_rank's chunk, by brute force over the mask model.
bool chunk_seen(const Problem& p, int q_rank, int kv_rank) {
  const AttentionShape shape = attention_shape_of(p);
  const int n = static_cast<int>(p.cp_size);
  for (int64_t q : partition_positions(p.scheme, p.seq_len, n, q_rank, p.documents))
    for (int64_t k : partition_positions(p.scheme, p.seq_len, n, kv_rank, p.documents))
      if (key_visible(shape, q, k)) return true;
  return false;
}

// Launches of the forward ring: every first and last step, and the middle steps whose chunk some
// local query sees; none on a rank that holds no row.
long expected_launches(const Problem& p) {
  const int n = static_cast<int>(p.cp_size);
  long launches = 0;
  for (int r = 0; r < n; ++r) {
    if (partition_positions(p.scheme, p.seq_len, n, r, p.documents).empty()) continue;
    for (int s = 0; s < n; ++s)
      if (s == 0 || s == n - 1 || chunk_seen(p, r, kv_source_rank(r, s, n))) ++launches;
  }
  return launches;
}

// The ring on the emulator against the float64 reference (bf16/fp16 inputs: relative error of out
// and absolute error of lse below the dtype's limit, tests/error_limit.h).
void check_against_reference(const Problem& p, const KernelSpec& spec, uint64_t seed) {
  SCOPED_TRACE(spec.uri() + " over " + std::to_string(p.cp_size) + " ranks, " + std::string(scheme_name(p.scheme)));
  p.validate();
  const AttentionVectors vec = random_vectors(p, seed);
  std::vector<int64_t> positions(static_cast<size_t>(p.seq_len));
  for (int64_t i = 0; i < p.seq_len; ++i) positions[static_cast<size_t>(i)] = i;
  const ReferenceForward want = reference_forward(attention_shape_of(p), vec.q, vec.k, vec.v, positions, positions);
  std::vector<std::pair<StepType, KernelSpec>> per_step;
  for (StepType step : step_types_for(p)) per_step.emplace_back(step, spec);
  const EmulatedRingResult got = run_emulated_ring(p, per_step, kArch, {vec.q.begin(), vec.q.end()},
                                                   {vec.k.begin(), vec.k.end()}, {vec.v.begin(), vec.v.end()},
                                                   test_store());
  EXPECT_EQ(got.launches, expected_launches(p));
  ASSERT_EQ(got.out.size(), want.out.size());
  double diff = 0, norm = 0, lse_error = 0;
  for (size_t i = 0; i < got.out.size(); ++i) {
    diff += (got.out[i] - want.out[i]) * (got.out[i] - want.out[i]);
    norm += want.out[i] * want.out[i];
  }
  for (size_t i = 0; i < got.lse.size(); ++i)
    lse_error = std::isnan(got.lse[i]) ? NAN : std::max(lse_error, std::abs(got.lse[i] - want.lse[i]));
  // NaN (an unwritten element) fails too.
  testing::expect_within_limit(std::sqrt(diff / norm), p.dtype, spec.uri() + " out", testing::kOutputUlps);
  testing::expect_within_limit(lse_error, p.dtype, spec.uri() + " lse");
}

TEST(EmulatedRingMask, DocumentsAndLeftWindowsBf16) {
  const KernelSpec spec = small_spec(Dtype::kBf16, true, true, false);
  // Documents whose lengths divide 2N (equal shards), one of them shorter than a tile.
  Problem docs = masked_problem(Dtype::kBf16, Scheme::kZigzag, 2, 128, true);
  docs.documents = {40, 24, 64};
  check_against_reference(docs, spec, 1);
  Problem window = masked_problem(Dtype::kBf16, Scheme::kZigzag, 4, 128, true);
  window.window_left = 20;
  check_against_reference(window, spec, 2);
}

// A causal problem whose window has a right side only, FlashAttention's causal (-1, 0) or any other,
// runs the plain causal kernel (kernel_needs_key_intervals): no interval tables are passed, and
// the float64 reference, which applies the right side, agrees.
TEST(EmulatedRingMask, CausalWithARightSideOnlyRunsThePlainCausalKernel) {
  const KernelSpec spec = small_spec(Dtype::kBf16, true, false, false);
  for (int64_t right : {0, 5}) {
    Problem p = masked_problem(Dtype::kBf16, Scheme::kZigzag, 2, 128, true);
    p.window_right = right;
    ASSERT_FALSE(kernel_needs_key_intervals(p));
    check_against_reference(p, spec, 10 + static_cast<uint64_t>(right));
  }
}

TEST(EmulatedRingMask, TwoSidedWindowAndDocumentsWithoutCausalityFp16) {
  const KernelSpec spec = small_spec(Dtype::kFp16, false, true, false);
  Problem window = masked_problem(Dtype::kFp16, Scheme::kContiguous, 2, 128, false);
  window.window_left = 12;
  window.window_right = 7;
  check_against_reference(window, spec, 3);
  Problem docs = masked_problem(Dtype::kFp16, Scheme::kZigzag, 4, 128, false);
  docs.documents = {32, 96};
  check_against_reference(docs, spec, 4);
}

TEST(EmulatedRingMask, SoftcapBf16) {
  Problem p = masked_problem(Dtype::kBf16, Scheme::kZigzag, 2, 128, true);
  p.softcap = 2.5;  // scores of a few units: the cap bends most of them
  check_against_reference(p, small_spec(Dtype::kBf16, true, false, true), 5);
}

TEST(EmulatedRingMask, DocumentsWindowAndSoftcapCombinedFp16) {
  Problem p = masked_problem(Dtype::kFp16, Scheme::kZigzag, 4, 128, true);
  p.documents = {56, 8, 64};
  p.window_left = 17;
  p.softcap = 3;
  check_against_reference(p, small_spec(Dtype::kFp16, true, true, true), 6);
}

// Every .approx instruction the kernels issue (ex2 in the softmax, ex2 and rcp in the cap's
// tanh) at an edge of the PTX ISA's error bound, as a GPU may return it (emulation/
// cuda_emulation.h, "The .approx instructions"): the softcap kernels still meet the dtype's
// limit. Caps of 1 and 0.5 bend most scores; caps of 30 and 50 over logits of that size (a
// softmax scale 8 and 16 times 1/sqrt(64)), Gemma 2's and Grok's caps where they act, are where
// tanh.approx failed: its 2^-11 on logits of 30-50 put lse at 1.6-2.9 bf16 and 13-23 fp16 units
// of the limit, fp16's out at 3.3-6.5 (the mixed edge); from ex2 and rcp every error here is
// below 0.31 of it.
TEST(EmulatedRingMask, SoftcapWithinTheIsasApproximationBounds) {
  for (EmulatedApproximation mode : testing::kApproximationEdges) {
    SCOPED_TRACE(approximation_name(mode));
    testing::ScopedApproximation approximation(mode);
    Problem p = masked_problem(Dtype::kBf16, Scheme::kZigzag, 2, 128, true);
    p.softcap = 1.0;
    check_against_reference(p, small_spec(Dtype::kBf16, true, false, true), 5);
    Problem q = masked_problem(Dtype::kFp16, Scheme::kZigzag, 4, 128, true);
    q.documents = {56, 8, 64};
    q.window_left = 17;
    q.softcap = 0.5;
    check_against_reference(q, small_spec(Dtype::kFp16, true, true, true), 6);
    for (const auto& [dtype, cap, scale] : {std::tuple{Dtype::kBf16, 30.0, 1.0}, std::tuple{Dtype::kFp16, 50.0, 2.0}}) {
      Problem large = masked_problem(dtype, Scheme::kZigzag, 2, 128, true);
      large.softcap = cap;
      large.softmax_scale = scale;
      check_against_reference(large, small_spec(dtype, true, false, true), 8);
    }
  }
}

// The approximation mode reaches the kernels' shared objects (each carries its own emulator): the
// lse of one problem moves when ex2 and rcp move to an edge, and is back once the guard ends.
TEST(EmulatedRingMask, TheApproximationModeReachesTheKernels) {
  Problem p = masked_problem(Dtype::kBf16, Scheme::kZigzag, 2, 128, true);
  p.softcap = 2.5;
  const AttentionVectors vec = random_vectors(p, 7);
  std::vector<std::pair<StepType, KernelSpec>> per_step;
  for (StepType step : step_types_for(p)) per_step.emplace_back(step, small_spec(Dtype::kBf16, true, false, true));
  const auto run = [&] {
    return run_emulated_ring(p, per_step, kArch, {vec.q.begin(), vec.q.end()}, {vec.k.begin(), vec.k.end()},
                             {vec.v.begin(), vec.v.end()}, test_store());
  };
  const EmulatedRingResult exact = run();
  for (EmulatedApproximation mode : testing::kApproximationEdges) {
    SCOPED_TRACE(approximation_name(mode));
    testing::ScopedApproximation approximation(mode);
    EXPECT_NE(run().lse, exact.lse);
  }
  EXPECT_EQ(run().lse, exact.lse);
}

// The shared float64 vectors of format 2 (../shared/vectors/v2, where present): the two-sided
// window case, whose length divides rings of 2 and 4 (the packed-document cases and the project's
// own v2 vectors do not, which the kernels do not run yet), in fp16 through the kernel above (its
// inputs are exact in bf16; they stay within fp16's range and lose at most its rounding).
TEST(EmulatedRingMask, TwoSidedWindowVectorsOfFormatTwo) {
  const std::string file = testing::source_dir() + "/../shared/vectors/v2/v2_window_l16_r8_full_hd64.json";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << file << " is not here";
  const AttentionVectors vec = load_attention_vectors(file);
  const KernelSpec spec = small_spec(Dtype::kFp16, false, true, false);
  for (const auto& [n, scheme] : {std::pair{2, Scheme::kContiguous}, std::pair{4, Scheme::kZigzag}}) {
    const Problem p = problem_from_vectors(vec, n, scheme, Dtype::kFp16);
    ASSERT_EQ(p.window_left, 16);
    ASSERT_EQ(p.window_right, 8);
    ASSERT_FALSE(p.causal);
    SCOPED_TRACE(std::to_string(n) + " ranks");
    std::vector<std::pair<StepType, KernelSpec>> per_step;
    for (StepType step : step_types_for(p)) per_step.emplace_back(step, spec);
    const EmulatedRingResult got = run_emulated_ring(p, per_step, kArch, {vec.q.begin(), vec.q.end()},
                                                     {vec.k.begin(), vec.k.end()}, {vec.v.begin(), vec.v.end()},
                                                     test_store());
    EXPECT_EQ(got.launches, expected_launches(p));
    testing::expect_within_limit(relative_error(got.out, vec.out), p.dtype, vec.name + " out", testing::kOutputUlps);
    double lse_error = 0;
    for (size_t i = 0; i < got.lse.size(); ++i)
      lse_error = std::isnan(got.lse[i]) ? NAN : std::max(lse_error, std::abs(got.lse[i] - vec.lse[i]));
    testing::expect_within_limit(lse_error, p.dtype, vec.name + " lse");
  }
}

// ---- What the masks skip is never read ---------------------------------------------------------

// A rank's backend with read counting around each forward step: before the step the counters of
// its Q and of the held K/V slot are zeroed, after it they are compared with what the mask model
// says the kernel needs, and a step that launched although nothing needed it (or the reverse) is
// recorded. Everything else is the KernelRingBackend's.
class CountingBackend final : public RingBackend {
 public:
  // q, k, v: the rank's own tensors (step 0 reads its K/V in place, later steps the slots).
  CountingBackend(const Problem& p, int rank, EmulatedDevice& device, KernelRingBackend& inner, const void* q,
                  const void* k, const void* v, const KernelSpec& spec)
      : p_(p), rank_(rank), device_(device), inner_(inner), q_(q), spec_(spec) {
    for (const void* own : {q, k, v}) device_.count_reads(own);
    for (int slot = 0; slot < 2; ++slot)
      for (const BufferView& b : inner_.kv_buffers(slot)) device_.count_reads(b.data);
  }
  std::vector<BufferView> kv_buffers(int slot) override { return inner_.kv_buffers(slot); }
  // The rank's own K/V, which the inner backend reads in place and sends from there: without this
  // the driver sent slot 0, which nothing filled, and the next rank attended to the allocation's
  // fill (the emulator's uninitialized-read check found it; the read counts could not).
  std::vector<BufferView> first_kv_send_buffers() override { return inner_.first_kv_send_buffers(); }
  std::vector<BufferView> dkv_buffers(int slot) override { return inner_.dkv_buffers(slot); }
  void forward_begin() override { inner_.forward_begin(); }
  void forward_step(const RingStep& step) override;
  void backward_begin() override {}
  void backward_step(const RingStep&) override {}
  void accumulate_dkv(int, bool) override {}
  void backward_end(int) override {}

  std::string failures;  // one line per mismatch, the first few
  long skipped_tiles = 0, empty_blocks = 0, skipped_steps = 0;  // what the problem exercised

 private:
  const Problem& p_;
  int rank_;
  EmulatedDevice& device_;
  KernelRingBackend& inner_;
  const void* q_;
  KernelSpec spec_;
  void fail(const std::string& what) {
    if (std::count(failures.begin(), failures.end(), '\n') < 8) failures += what + "\n";
  }
};

void CountingBackend::forward_step(const RingStep& step) {
  // The buffers the step's kernel reads K and V from (the caller's own at step 0, a slot after).
  const RingFwdParams held = inner_.step_params(step);
  const void* const kv[2] = {held.k, held.v};
  for (const void* b : kv) device_.take_reads(b);
  device_.take_reads(q_);
  const long before = device_.launches();
  inner_.forward_step(step);
  const bool launched = device_.launches() > before;

  // What the mask model says each (query block, key tile) pair needs.
  const int n = static_cast<int>(p_.cp_size);
  const AttentionShape shape = attention_shape_of(p_);
  const std::vector<int64_t> queries = partition_positions(p_.scheme, p_.seq_len, n, rank_, p_.documents);
  const std::vector<int64_t> keys = partition_positions(p_.scheme, p_.seq_len, n, step.kv_rank, p_.documents);
  const int kv_len = inner_.step_params(step).kv_len;
  const int q_len = static_cast<int>(queries.size());
  const int q_blocks = (q_len + spec_.block_m - 1) / spec_.block_m;
  const int k_tiles = (kv_len + spec_.block_n - 1) / spec_.block_n;
  std::vector<char> needed(static_cast<size_t>(q_blocks * k_tiles), 0);
  bool any = false;
  for (int i = 0; i < q_len; ++i)
    for (int j = 0; j < kv_len; ++j)
      if (key_visible(shape, queries[static_cast<size_t>(i)], keys[static_cast<size_t>(j)])) {
        needed[static_cast<size_t>((i / spec_.block_m) * k_tiles + j / spec_.block_n)] = 1;
        any = true;
      }
  const std::string where = "rank " + std::to_string(rank_) + " step " + std::to_string(step.step) + ": ";
  if (launched != (any || step.is_first || step.is_last))
    fail(where + (launched ? "launched although no local query sees the chunk" : "did not launch"));
  if (!launched) ++skipped_steps;

  // Rows are head_dim 16-bit elements, head_dim / 8 chunks of 16 bytes; batch and heads are 1.
  const int chunks_per_row = kHeadDim * 2 / 16;
  const std::vector<unsigned> k_reads = device_.take_reads(kv[0]), v_reads = device_.take_reads(kv[1]);
  for (int j = 0; j < static_cast<int>(keys.size()); ++j) {
    unsigned want = 0;  // each query block that runs the row's tile loads it once
    for (int b = 0; b < q_blocks && j < kv_len; ++b) want += needed[static_cast<size_t>(b * k_tiles + j / spec_.block_n)];
    if (want == 0 && j < kv_len && j % spec_.block_n == 0) ++skipped_tiles;
    for (int c = 0; c < chunks_per_row; ++c) {
      const size_t chunk = static_cast<size_t>(j * chunks_per_row + c);
      if (k_reads[chunk] != want || v_reads[chunk] != want)
        fail(where + "key row " + std::to_string(j) + " chunk " + std::to_string(c) + " read " +
             std::to_string(k_reads[chunk]) + " (K) and " + std::to_string(v_reads[chunk]) + " (V) times; expected " +
             std::to_string(want));
    }
  }
  const std::vector<unsigned> q_reads = device_.take_reads(q_);
  for (int i = 0; i < q_len; ++i) {
    bool block_runs = false;
    for (int t = 0; t < k_tiles; ++t) block_runs = block_runs || needed[static_cast<size_t>((i / spec_.block_m) * k_tiles + t)];
    if (!block_runs && launched && i % spec_.block_m == 0) ++empty_blocks;
    const unsigned want = launched && block_runs ? 1 : 0;
    for (int c = 0; c < chunks_per_row; ++c) {
      const unsigned got = q_reads[static_cast<size_t>(i * chunks_per_row + c)];
      if (got != want)
        fail(where + "query row " + std::to_string(i) + " chunk " + std::to_string(c) + " read " + std::to_string(got) +
             " times; expected " + std::to_string(want));
    }
  }
}

// Runs the forward ring of `p` with counting backends; returns what the checks found, and adds up
// what the problem exercised.
std::string count_reads_over_the_ring(const Problem& p, const KernelSpec& spec, long* skipped_tiles,
                                      long* empty_blocks, long* skipped_steps) {
  std::vector<std::pair<StepType, KernelSpec>> per_step;
  for (StepType step : step_types_for(p)) per_step.emplace_back(step, spec);
  EmulatedDevice device(per_step, kArch, test_store());
  const RingPositions positions(p, device);
  const int n = static_cast<int>(p.cp_size);
  const AttentionVectors vec = random_vectors(p, 11);
  const size_t q_bytes = static_cast<size_t>(p.local_seq_len() * p.head_dim) * 2;
  std::vector<DeviceAllocation> tensors;
  std::vector<std::unique_ptr<KernelRingBackend>> inner;
  std::vector<std::unique_ptr<CountingBackend>> counting;
  for (int r = 0; r < n; ++r) {
    auto shard = [&](const std::vector<double>& full) {
      const std::vector<double> rows = scatter_shard(full, 1, 1, p.seq_len, p.head_dim, p.scheme, n, r, p.documents);
      const std::vector<uint16_t> half = to_half(std::vector<float>(rows.begin(), rows.end()), p.dtype);
      DeviceAllocation a = device.allocate(half.size() * 2);
      device.upload(a.data(), half.data(), half.size() * 2);
      return a;
    };
    DeviceAllocation q = shard(vec.q), k = shard(vec.k), v = shard(vec.v);
    DeviceAllocation out = device.allocate(q_bytes), lse = device.allocate(static_cast<size_t>(p.local_seq_len()) * 4);
    inner.push_back(std::make_unique<KernelRingBackend>(p, r, device, positions));
    inner.back()->bind({q.data(), k.data(), v.data(), out.data(), lse.as<float>()});
    counting.push_back(std::make_unique<CountingBackend>(p, r, device, *inner.back(), q.data(), k.data(), v.data(), spec));
    for (DeviceAllocation* a : {&q, &k, &v, &out, &lse}) tensors.push_back(*a);
  }
  run_ring_threads(n, [&](int rank, Transport& transport) { ring_forward(*counting[rank], transport); });
  std::string failures;
  for (const auto& c : counting) {
    failures += c->failures;
    *skipped_tiles += c->skipped_tiles;
    *empty_blocks += c->empty_blocks;
    *skipped_steps += c->skipped_steps;
  }
  return failures;
}

TEST(EmulatedRingMask, SkippedTilesBlocksAndStepsAreNeverRead) {
  const KernelSpec spec = small_spec(Dtype::kBf16, true, true, false);
  // A window shorter than a shard on a contiguous ring: a chunk two ranks back is out of reach
  // (a skipped middle step), the one just behind is seen only by the first query block (the other
  // reads no Q) and only through its last key tile; the first rank's future chunks launch only to
  // finalize (rank 0's last step) and read nothing.
  Problem window = masked_problem(Dtype::kBf16, Scheme::kContiguous, 4, 256, true);
  window.window_left = 20;
  long skipped_tiles = 0, empty_blocks = 0, skipped_steps = 0;
  EXPECT_EQ(count_reads_over_the_ring(window, spec, &skipped_tiles, &empty_blocks, &skipped_steps), "");
  // Packed documents on a zigzag ring: tiles of other documents are skipped inside every step.
  Problem docs = masked_problem(Dtype::kBf16, Scheme::kZigzag, 2, 256, true);
  docs.documents = {64, 128, 64};
  docs.window_left = 40;
  EXPECT_EQ(count_reads_over_the_ring(docs, spec, &skipped_tiles, &empty_blocks, &skipped_steps), "");
  // The problems exercise every kind of skip.
  EXPECT_GT(skipped_tiles, 0);
  EXPECT_GT(empty_blocks, 0);
  EXPECT_GT(skipped_steps, 0);
}

// What the cases above leave out, each once (a reviewer's list; its own runs of them passed): GQA
// groups of 4 to 16 with several kv heads and batch entries, head dims 96 to 256, the bshd, sbhd
// and thd layouts, the striped and zigzag-token schemes, rings of 1 and 3, ranks that hold no
// row, documents with empty ones, under windows and a softcap. Small tiles (32 x 32, two warps)
// of the problem's own group and head dim.
void check_wide(const testing::RingCase& c, uint64_t seed) {
  const Problem p = testing::ring_case_problem(c, "masked");
  KernelSpec spec = KernelSpec::default_for_arch(c.dtype, static_cast<int>(c.head_dim), c.causal,
                                                 static_cast<int>(c.group), kArch);
  spec.block_m = 32;
  spec.block_n = 32;
  spec.warps = 2;
  spec.stages = 2;
  spec.key_intervals = kernel_needs_key_intervals(p);
  spec.softcap = kernel_needs_softcap(p);
  SCOPED_TRACE("layout " + (c.layout.empty() ? std::string("bhsd") : c.layout));
  check_against_reference(p, spec, seed);
}

TEST(EmulatedRingMask, GqaBatchLayoutsSchemesAndRingSizes) {
  // GQA 8 over 2 kv heads, batch 2, head dim 128, bshd, zigzag over 3: documents with an empty
  // one, a left window and a softcap.
  check_wide({Dtype::kBf16, Scheme::kZigzag, 3, true, 2, 2, 8, 128, "bshd", {30, 0, 50, 16}, 0, 12, -1, 15}, 601);
  // GQA 16, sbhd, striped over 4, not causal: a two-sided window and documents.
  check_wide({Dtype::kFp16, Scheme::kStriped, 4, false, 1, 1, 16, 64, "sbhd", {40, 0, 24}, 0, 5, 3, 0}, 602);
  // thd (batch 1), contiguous over 4, GQA 4 over 4 kv heads, head dim 96: documents and a window.
  check_wide({Dtype::kFp16, Scheme::kContiguous, 4, true, 1, 4, 4, 96, "thd", {36, 28}, 0, 9, -1, 0}, 603);
  // zigzag-token over 3, head dim 256: a softcap alone.
  check_wide({Dtype::kFp16, Scheme::kZigzagToken, 3, true, 2, 1, 2, 256, "", {}, 48, -1, -1, 1.5}, 604);
  // One rank: documents, a window and a softcap.
  check_wide({Dtype::kBf16, Scheme::kZigzag, 1, true, 1, 2, 4, 64, "", {20, 44}, 0, 7, -1, 10}, 605);
  // Six tokens over eight ranks (ranks that hold no row): documents and a window.
  check_wide({Dtype::kBf16, Scheme::kContiguous, 8, true, 1, 1, 2, 64, "", {4, 2}, 0, 1, -1, 0}, 606);
}

}  // namespace
}  // namespace cpgen
