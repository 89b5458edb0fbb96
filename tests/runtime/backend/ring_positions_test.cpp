// RingPositions: the per-rank position and key-interval tables the kernels read, and the host-side
// chunk visibility that decides which ring steps need compute.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "runtime/backend/kernel_ring_backend.h"
#include "runtime/core/attention_shape.h"
#include "runtime/ring/partition.h"
#include "tests/runtime/backend/model_device.h"

namespace cpgen {
namespace {

Problem causal_problem(Scheme scheme) {
  Problem p;
  p.batch = 1;
  p.q_heads = p.kv_heads = 2;
  p.head_dim = 64;
  p.seq_len = 48;
  p.cp_size = 3;
  p.scheme = scheme;
  p.causal = true;
  return p;
}

TEST(RingPositions, TablesHoldEachRanksPositionsAndIntervals) {
  for (Scheme scheme : {Scheme::kZigzag, Scheme::kContiguous, Scheme::kStriped}) {
    const Problem p = causal_problem(scheme);
    test::ModelDevice device(std::make_shared<test::ModelMemory>(), p.dtype, 64, true);
    RingPositions table(p, device);
    const AttentionShape shape = attention_shape_of(p);
    for (int r = 0; r < 3; ++r) {
      const std::vector<int64_t> expected = partition_positions(scheme, 48, 3, r, {});
      ASSERT_EQ(table.rank_len(r), static_cast<int64_t>(expected.size()));
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(table.rank_positions(r)[i], expected[i]);
        const KeyInterval keys = visible_keys(shape, expected[i]);
        EXPECT_EQ(table.rank_key_first(r)[i], keys.first);
        EXPECT_EQ(table.rank_key_last(r)[i], keys.last);  // causal: the query's own position
      }
    }
    EXPECT_EQ(table.max_rank_len(), 16);
  }
}

TEST(RingPositions, ChunkVisibilityMatchesBruteForce) {
  for (Scheme scheme : {Scheme::kZigzag, Scheme::kContiguous, Scheme::kStriped}) {
    const Problem p = causal_problem(scheme);
    test::ModelDevice device(std::make_shared<test::ModelMemory>(), p.dtype, 64, true);
    RingPositions table(p, device);
    const AttentionShape shape = attention_shape_of(p);
    for (int q = 0; q < 3; ++q)
      for (int k = 0; k < 3; ++k) {
        bool any = false;
        for (int64_t qp : partition_positions(scheme, 48, 3, q, {}))
          for (int64_t kp : partition_positions(scheme, 48, 3, k, {})) any = any || key_visible(shape, qp, kp);
        EXPECT_EQ(table.chunk_visible(q, k), any) << scheme_name(scheme) << " q " << q << " k " << k;
      }
    // Contiguous causal: a rank never sees a later rank's chunk.
    if (scheme == Scheme::kContiguous) EXPECT_FALSE(table.chunk_visible(0, 2));
  }
}

}  // namespace
}  // namespace cpgen
