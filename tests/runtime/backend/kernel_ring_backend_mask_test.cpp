// KernelRingBackend's forward params and launches on masked problems (issue 11), without running a
// kernel: a recording device keeps every forward launch. The interval tables and the softcap reach
// the kernels that are specialized on them and no others, a zigzag key-half step keeps its whole
// chunk under packed documents, and a middle step whose chunk no local query sees launches nothing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "runtime/backend/kernel_ring_backend.h"
#include "runtime/core/attention_shape.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/schedule.h"
#include "test_util.h"

namespace cpgen {
namespace {

// Host memory, and forward launches recorded instead of run.
class RecordingDevice final : public KernelDevice {
 public:
  DeviceAllocation allocate(size_t bytes) override {
    return DeviceAllocation(std::shared_ptr<void>(std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64), std::free),
                            bytes);
  }
  void upload(void* dst, const void* host, size_t bytes) override { std::memcpy(dst, host, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void zero(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  void launch_forward(StepType, const RingFwdParams& params) override { launches.push_back(params); }
  void launch_backward_pre(const RingBwdPreParams&) override {}
  void launch_backward(StepType, const RingBwdParams&) override {}
  void launch_backward_convert(const RingBwdConvertParams&) override {}
  std::vector<RingFwdParams> launches;
};

Problem problem(Scheme scheme, int cp_size, int64_t seq_len) {
  return testing::ring_problem(scheme, seq_len, cp_size, /*causal=*/true, /*q_heads=*/2, /*kv_heads=*/1, /*batch=*/1);
}

struct Rank {
  RecordingDevice device;
  std::unique_ptr<RingPositions> positions;
  std::unique_ptr<KernelRingBackend> backend;
  std::vector<DeviceAllocation> tensors;
  Rank(const Problem& p, int rank) {
    positions = std::make_unique<RingPositions>(p, device);
    backend = std::make_unique<KernelRingBackend>(p, rank, device, *positions);
    const size_t bytes = static_cast<size_t>(p.q_heads * p.local_seq_len() * p.head_dim) * 2;
    for (int i = 0; i < 5; ++i) tensors.push_back(device.allocate(bytes));
    backend->bind({tensors[0].data(), tensors[1].data(), tensors[2].data(), tensors[3].data(), tensors[4].as<float>()});
  }
  RingStep step(const Problem& p, int rank, int s) const {
    const int n = static_cast<int>(p.cp_size);
    return {s, s % 2, kv_source_rank(rank, s, n), s == 0, s == n - 1};
  }
};

TEST(KernelRingBackendMask, IntervalTablesAndSoftcapOnlyForTheKernelsThatReadThem) {
  Problem plain = problem(Scheme::kZigzag, 2, 64);
  Rank a(plain, 1);
  RingFwdParams p = a.backend->step_params(a.step(plain, 1, 0));
  EXPECT_EQ(p.q_key_first, nullptr);
  EXPECT_EQ(p.q_key_last, nullptr);
  EXPECT_EQ(p.softcap, 0.0f);

  Problem masked = plain;
  masked.window_left = 5;
  masked.softcap = 7.5;
  Rank b(masked, 1);
  p = b.backend->step_params(b.step(masked, 1, 1));
  EXPECT_EQ(p.q_key_first, b.positions->rank_key_first(1));  // the rank's own rows, every step
  EXPECT_EQ(p.q_key_last, b.positions->rank_key_last(1));
  EXPECT_EQ(p.softcap, 7.5f);
  // The tables hold the mask model's interval of each local query.
  const AttentionShape shape = attention_shape_of(masked);
  const std::vector<int64_t> mine = partition_positions(masked.scheme, masked.seq_len, 2, 1, masked.documents);
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_EQ(p.q_key_first[i], visible_keys(shape, mine[i]).first) << i;
    EXPECT_EQ(p.q_key_last[i], visible_keys(shape, mine[i]).last) << i;
  }

  Problem capped = plain;  // a softcap alone needs no intervals
  capped.softcap = 3;
  Rank c(capped, 0);
  p = c.backend->step_params(c.step(capped, 0, 0));
  EXPECT_EQ(p.q_key_first, nullptr);
  EXPECT_EQ(p.softcap, 3.0f);
}

// Zigzag rank 1 holds chunk 1 and 2 of each document; at step 1 it holds rank 0's chunks 0 and 3.
// With one document the second half of that chunk (chunk 3) lies after every local query, so the
// launch covers the first half; with two documents the first half is document 0's two chunks and
// document 1's chunk 0 lies in the second half, visible to document 1's queries.
TEST(KernelRingBackendMask, ZigzagKeyHalfStepKeepsTheWholeChunkUnderDocuments) {
  Problem one = problem(Scheme::kZigzag, 2, 64);
  Rank a(one, 1);
  EXPECT_EQ(a.backend->step_params(a.step(one, 1, 1)).kv_len, 16);
  Problem docs = one;
  docs.documents = {32, 32};
  Rank b(docs, 1);
  EXPECT_EQ(b.backend->step_params(b.step(docs, 1, 1)).kv_len, 32);
}

// Contiguous ring of 4, window of 20 behind each query: rank 0 sees no other chunk (they are in its
// future) and rank 3 sees only the chunk just behind it. Middle steps whose chunk nobody local sees
// launch nothing; the first and last steps always launch (they start and finalize the state).
// launches_forward (what `cpgen bench` times each launch alone by) says the same beforehand.
TEST(KernelRingBackendMask, MiddleStepsWhoseChunkNoQuerySeesLaunchNothing) {
  Problem p = problem(Scheme::kContiguous, 4, 256);
  p.window_left = 20;
  for (int rank : {0, 3}) {
    Rank r(p, rank);
    r.backend->forward_begin();
    std::vector<int> launched;
    for (int s = 0; s < 4; ++s) {
      const size_t before = r.device.launches.size();
      const bool predicted = r.backend->launches_forward(r.step(p, rank, s));
      r.backend->forward_step(r.step(p, rank, s));
      if (r.device.launches.size() > before) launched.push_back(s);
      EXPECT_EQ(predicted, r.device.launches.size() > before) << "rank " << rank << " step " << s;
    }
    // rank 0: chunks 3, 2 (middle, future) skipped, chunk 1 at the last step launched;
    // rank 3: chunk 2 (step 1) seen, chunk 1 (step 2) out of the window, chunk 0 last.
    EXPECT_EQ(launched, (rank == 0 ? std::vector<int>{0, 3} : std::vector<int>{0, 1, 3})) << "rank " << rank;
  }
}

}  // namespace
}  // namespace cpgen
