// The emulated ring harness of the sm_90a forward step kernel (templates/step_fwd_wgmma.cuh),
// shared by its emulated tests: the problem's tensors gathered per rank in either layout with
// poisoned padding, every step launched through the CPU emulator with tensor maps built from the
// template's own map descriptions and the launch's buffers registered with the sanitizer, the
// TMA reads optionally checked against the key tiles the contract lets a block load, and the
// result compared with float64 within the dtype's limit (tests/error_limit.h: 1.6e-2 bf16, 2e-3
// fp16, inside the 2e-2). Include it last in a test: it includes the emulator.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "emulation/tensor_map.h"
#include "error_limit.h"
#include "ring_step_harness.h"
#include "runtime/core/attention_shape.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/reference.h"
#include "test_util.h"

// Last: defines __CUDACC__ and the CUDA keywords for the template headers below.
#include "emulation/cuda_emulation.h"
#include "emulation/finding_test_util.h"
#include "cpgen/step_fwd_wgmma.cuh"
#include "element_dtype.h"

namespace cpgen::wgmma_harness {

// The kernel vocabulary of the tests that use the harness (`using namespace wgmma_harness`).
using device::Bf16;
using device::Fp16;
using device::WgmmaFwdTraits;

using testing::AttentionOutput;
using testing::AttentionProblem;

// Encodes one map from its description with the emulator's encoder (the backend hands the same
// fields to cuTensorMapEncodeTiled).
inline std::string encode(const TmaMapDescription& d, device::TmaMap* map) {
  const uint32_t ones[5] = {1, 1, 1, 1, 1};
  static_assert(sizeof(device::TmaMap) == sizeof(emulation::TensorMap));
  return emulation::encode_tensor_map_tiled(reinterpret_cast<emulation::TensorMap*>(map), d.data_type, d.rank, d.global,
                                            d.dims, d.strides, d.box, ones, 0, d.swizzle, 0, 0);
}

// One emulated ring run: the random problem's tensors as every rank holds them, the mask, and how
// the steps launch.
struct RingSetup {
  AttentionShape shape;                  // heads, head dim, scale and the mask (causal, window, documents, softcap)
  std::vector<std::vector<int>> ranks;   // each rank's global positions, increasing
  bool bshd = false;                     // tensors [batch, rows, heads, dim] (flash-attn's layout), else bhsd
  // > 0: every step launches twice, over the local queries [0, split) and [split, q_len), each a
  // view whose q_len is below the state's row pitch (state_len), as the zigzag query-half step is.
  int query_split = 0;
  bool count_reads = false;  // check every launch's TMA reads of Q, K and V against the tile contract
  // A persistent kernel (Traits::kPersistent) is launched over at most this many CTAs, as a GPU
  // launches it over its resident ones (launch_grid.h).
  int resident_ctas = 3;
  // ... and walks the (batch, kv head) pairs in L2 sections of this many (layout.cuh
  // persistent_item): two, so that a problem of more pairs runs several sections.
  int section_pairs = 2;
  // ... and takes its items from a zeroed work counter, as the runtime launches it; false: no
  // counter (a null pointer), so each CTA steps through the items by the grid's size.
  bool work_counter = true;
};

// What the read checks saw, summed over the run: the problem must exercise every kind of skip.
struct SkipCounts {
  long skipped_tiles = 0;     // key tiles of a running block's chunk that it never loaded
  long empty_blocks = 0;      // query blocks that ran no tile (and loaded no Q)
  long empty_launches = 0;    // launches in which no block ran a tile
};

// Element strides of a [batch, heads, rows, dim + kRowPad] tensor in either layout.
struct Strides {
  int64_t batch, head, row;
};
inline int row_pitch(int head_dim) { return head_dim + testing::kRowPad; }

inline Strides layout_strides(bool bshd, int heads, int rows, int head_dim) {
  const int64_t pitch = row_pitch(head_dim);
  if (bshd) return {static_cast<int64_t>(rows) * heads * pitch, pitch, heads * pitch};
  return {static_cast<int64_t>(heads) * rows * pitch, rows * pitch, pitch};
}

// The rows at `positions` of a full [batch, heads, seq, dim] float64 tensor, in 16 bits, in the
// layout, with poisoned padding.
inline std::vector<uint16_t> gather(const std::vector<double>& full, int batch, int heads, int seq, int dim,
                             const std::vector<int>& positions, bool bshd, Dtype dtype) {
  const int rows = static_cast<int>(positions.size());
  const Strides st = layout_strides(bshd, heads, rows, dim);
  std::vector<uint16_t> out(static_cast<size_t>(batch) * heads * rows * row_pitch(dim), testing::kPoison16);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < rows; ++i)
        for (int d = 0; d < dim; ++d)
          out[b * st.batch + h * st.head + i * st.row + d] =
              testing::to_bits(full[((static_cast<size_t>(b) * heads + h) * seq + positions[i]) * dim + d], dtype);
  return out;
}

// The key tiles query block `block` of a launch loads, by the contract of step_fwd.cuh (the first
// and last queries of the block bound them), found by linear scans: [begin, end), empty if none.
template <typename Traits>
std::pair<int, int> contract_tiles(const AttentionShape& shape, const std::vector<int>& queries,
                                   const std::vector<int>& keys, int block) {
  const int q_len = static_cast<int>(queries.size()), kv_len = static_cast<int>(keys.size());
  const int first = block * Traits::kBlockM / Traits::kGroup;
  const int last = std::min(((block + 1) * Traits::kBlockM - 1) / Traits::kGroup, q_len - 1);
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  if (Traits::kKeyIntervals) {
    lo = visible_keys(shape, queries[first]).first;
    hi = visible_keys(shape, queries[last]).last;
  } else if (Traits::kCausal) {
    hi = queries[last];
  }
  int begin = kv_len, end = -1;
  for (int j = 0; j < kv_len; ++j)
    if (keys[j] >= lo && keys[j] <= hi) {
      begin = std::min(begin, j);
      end = j;
    }
  if (end < 0) return {0, 0};
  return {begin / Traits::kBlockN, end / Traits::kBlockN + 1};
}

// Compares one launch's read counters with the contract; returns "" or the first mismatch.
template <typename Traits>
std::string check_reads(const RingSetup& setup, const std::vector<int>& queries, const std::vector<int>& keys,
                        const std::vector<uint32_t>& q_reads, const Strides& q_st,
                        const std::vector<uint32_t>& k_reads, const std::vector<uint32_t>& v_reads,
                        const Strides& kv_st, SkipCounts* skips) {
  const AttentionShape& shape = setup.shape;
  const int D = static_cast<int>(shape.head_dim), G = Traits::kGroup;
  const int q_len = static_cast<int>(queries.size()), kv_len = static_cast<int>(keys.size());
  const int blocks = (q_len * G + Traits::kBlockM - 1) / Traits::kBlockM;
  const int row_chunks = D * 2 / 16, pad_chunks = testing::kRowPad * 2 / 16;
  std::vector<int> key_want(static_cast<size_t>(kv_len), 0);
  std::vector<bool> block_runs(static_cast<size_t>(blocks));
  bool any = false;
  for (int blk = 0; blk < blocks; ++blk) {
    const auto [begin, end] = contract_tiles<Traits>(shape, queries, keys, blk);
    block_runs[blk] = begin < end;
    any = any || begin < end;
    if (begin >= end) ++skips->empty_blocks;
    else skips->skipped_tiles += (kv_len + Traits::kBlockN - 1) / Traits::kBlockN - (end - begin);
    for (int j = begin * Traits::kBlockN; j < std::min(end * Traits::kBlockN, kv_len); ++j) ++key_want[j];
  }
  if (!any) ++skips->empty_launches;
  auto at = [](const Strides& st, int b, int h, int i) { return (b * st.batch + h * st.head + i * st.row) * 2 / 16; };
  for (int b = 0; b < static_cast<int>(shape.batch); ++b) {
    for (int h = 0; h < static_cast<int>(shape.kv_heads); ++h)
      for (int j = 0; j < kv_len; ++j)
        for (int c = 0; c < row_chunks + pad_chunks; ++c) {
          const int64_t chunk = at(kv_st, b, h, j) + c;
          const uint32_t want = c < row_chunks ? key_want[j] : 0;
          if (k_reads[chunk] != want || v_reads[chunk] != want)
            return "b" + std::to_string(b) + " kv head " + std::to_string(h) + " key " + std::to_string(j) +
                   " chunk " + std::to_string(c) + ": read " + std::to_string(k_reads[chunk]) + " (K), " +
                   std::to_string(v_reads[chunk]) + " (V) times; the contract says " + std::to_string(want);
        }
    for (int h = 0; h < static_cast<int>(shape.q_heads); ++h)
      for (int i = 0; i < q_len; ++i)
        for (int c = 0; c < row_chunks + pad_chunks; ++c) {
          const int64_t chunk = at(q_st, b, h, i) + c;
          const uint32_t want = c < row_chunks && block_runs[i * G / Traits::kBlockM] ? 1 : 0;
          if (q_reads[chunk] != want)
            return "b" + std::to_string(b) + " head " + std::to_string(h) + " query " + std::to_string(i) +
                   " chunk " + std::to_string(c) + ": read " + std::to_string(q_reads[chunk]) +
                   " times; the contract says " + std::to_string(want);
        }
  }
  return "";
}

template <typename Traits>
testing::RingRun run_emulated(const AttentionProblem& p, const RingSetup& setup, SkipCounts* skips = nullptr) {
  const Dtype dtype = testing::element_dtype<typename Traits::Element>();
  constexpr bool kBf16 = testing::element_dtype<typename Traits::Element>() == Dtype::kBf16;
  const int B = p.batch, HQ = p.q_heads, HK = p.kv_heads, D = p.head_dim, S = p.seq_len;
  const int n = static_cast<int>(setup.ranks.size());
  SkipCounts unused;
  if (skips == nullptr) skips = &unused;
  testing::RingRun run;
  run.result.out.assign(static_cast<size_t>(B) * HQ * S * D, std::numeric_limits<double>::quiet_NaN());
  run.result.lse.assign(static_cast<size_t>(B) * HQ * S, std::numeric_limits<double>::quiet_NaN());
  std::vector<std::vector<uint16_t>> k_chunks, v_chunks;
  for (const auto& positions : setup.ranks) {
    k_chunks.push_back(gather(p.k, B, HK, S, D, positions, setup.bshd, dtype));
    v_chunks.push_back(gather(p.v, B, HK, S, D, positions, setup.bshd, dtype));
  }
  // The state's and lse's fill: all-ones bytes, as the emulated device fills an allocation, so that
  // the sanitizer reports a read of any word nothing wrote (GlobalBuffer::poisoned; a NaN too).
  const float nan = std::bit_cast<float>(0xFFFFFFFFu);
  for (int r = 0; r < n; ++r) {
    const std::vector<int>& q_positions = setup.ranks[r];
    const int q_len = static_cast<int>(q_positions.size());
    std::vector<int> key_first(q_positions.size()), key_last(q_positions.size());
    for (int i = 0; i < q_len; ++i) {
      const KeyInterval keys = visible_keys(setup.shape, q_positions[i]);
      key_first[i] = static_cast<int>(keys.first);
      key_last[i] = static_cast<int>(std::min<int64_t>(keys.last, std::numeric_limits<int>::max()));
    }
    const Strides q_st = layout_strides(setup.bshd, HQ, q_len, D);
    std::vector<uint16_t> q = gather(p.q, B, HQ, S, D, q_positions, setup.bshd, dtype);
    std::vector<uint16_t> out(q.size(), testing::kPoison16);
    std::vector<float> lse(static_cast<size_t>(B) * HQ * q_len, nan);
    std::vector<float> o_state(static_cast<size_t>(B) * HQ * q_len * D, nan);
    std::vector<float> m_state(lse.size(), nan), l_state(lse.size(), nan);
    std::vector<uint32_t> q_reads((q.size() * 2 + 15) / 16);
    for (int step = 0; step < n; ++step) {
      const int src = ((r - step) % n + n) % n;
      const std::vector<int>& kv_positions = setup.ranks[src];
      const Strides kv_st = layout_strides(setup.bshd, HK, static_cast<int>(kv_positions.size()), D);
      std::vector<std::pair<int, int>> views = {{0, q_len}};
      if (setup.query_split > 0 && setup.query_split < q_len)
        views = {{0, setup.query_split}, {setup.query_split, q_len - setup.query_split}};
      for (const auto& [q0, rows] : views) {
        RingFwdWgmmaParams prm{};
        prm.section_pairs = setup.section_pairs;
        RingFwdParams& b = prm.base;
        b.q = q.data() + q0 * q_st.row;
        b.k = k_chunks[src].data();
        b.v = v_chunks[src].data();
        b.out = out.data() + q0 * q_st.row;
        b.lse = lse.data() + q0;
        b.o_state = o_state.data() + static_cast<size_t>(q0) * D;
        b.m_state = m_state.data() + q0;
        b.l_state = l_state.data() + q0;
        b.q_positions = q_positions.data() + q0;
        b.kv_positions = kv_positions.data();
        b.q_key_first = key_first.data() + q0;
        b.q_key_last = key_last.data() + q0;
        b.q_batch_stride = b.out_batch_stride = q_st.batch;
        b.q_head_stride = b.out_head_stride = q_st.head;
        b.q_row_stride = b.out_row_stride = q_st.row;
        b.k_batch_stride = b.v_batch_stride = kv_st.batch;
        b.k_head_stride = b.v_head_stride = kv_st.head;
        b.k_row_stride = b.v_row_stride = kv_st.row;
        b.batch = B;
        b.q_heads = HQ;
        b.kv_heads = HK;
        b.q_len = rows;
        b.kv_len = static_cast<int>(kv_positions.size());
        b.state_len = q_len;
        b.scale_log2 = static_cast<float>(setup.shape.scale * 1.4426950408889634);
        b.softcap = static_cast<float>(setup.shape.softcap);
        b.is_first_step = step == 0;
        b.is_last_step = step == n - 1;
        for (const auto& [description, map] :
             {std::pair{device::q_map_description(b, kBf16, D, Traits::kGroup, Traits::kBlockM), &prm.q_map},
              std::pair{device::kv_map_description(b, false, kBf16, D, Traits::kBlockN), &prm.k_map},
              std::pair{device::kv_map_description(b, true, kBf16, D, Traits::kBlockN), &prm.v_map}}) {
          const std::string error = encode(description, map);
          if (!error.empty()) {
            run.failure = "tensor map: " + error;
            return run;
          }
        }
        std::vector<uint32_t> k_reads((k_chunks[src].size() * 2 + 15) / 16), v_reads(k_reads.size());
        std::fill(q_reads.begin(), q_reads.end(), 0u);
        uint32_t* const count_q = setup.count_reads ? q_reads.data() : nullptr;
        uint32_t* const count_k = setup.count_reads ? k_reads.data() : nullptr;
        uint32_t* const count_v = setup.count_reads ? v_reads.data() : nullptr;
        // Every buffer the kernel may touch, so the sanitizer checks the TMA sources against them;
        // all poisoned: padding, out, lse and the state start all ones, and a read of a word still
        // so (padding, or state no earlier step wrote) is a finding.
        std::vector<emulation::GlobalBuffer> buffers =
            testing::poisoned_buffers(q, k_chunks[src], v_chunks[src], out, lse, o_state, m_state, l_state,
                                      q_positions, kv_positions, key_first, key_last);
        // The launch's work counter, zeroed before each launch as the runtime does.
        unsigned counter = 0;
        unsigned* const work_counter = Traits::kPersistent && setup.work_counter ? &counter : nullptr;
        if (work_counter) buffers.push_back({&counter, sizeof counter, nullptr, false});
        buffers[0].async_reads = count_q;
        buffers[1].async_reads = count_k;
        buffers[2].async_reads = count_v;
        emulation::set_global_buffers(buffers.data(), static_cast<int>(buffers.size()));
        const unsigned blocks = (rows * Traits::kGroup + Traits::kBlockM - 1) / Traits::kBlockM;
        device::FoldedPairs pairs = device::fold_pairs(B * HK);
        unsigned grid_x = blocks;
        if constexpr (Traits::kPersistent) {
          grid_x = static_cast<unsigned>(device::persistent_ctas(static_cast<long long>(blocks) * B * HK,
                                                                 setup.resident_ctas));
          pairs = {1, 1};
        }
        const std::string error = emulation::launch(grid_x, pairs.y, pairs.z, Traits::kThreads, Traits::kSharedBytes,
                                                    [&] { device::ring_fwd_step_wgmma<Traits>(prm, work_counter); });
        emulation::set_global_buffers(nullptr, 0);
        const std::string where = "rank " + std::to_string(r) + " step " + std::to_string(step) + " queries [" +
                                  std::to_string(q0) + ", " + std::to_string(q0 + rows) + "): ";
        if (!error.empty()) {
          run.failure = where + error;
          return run;
        }
        ++run.launches;
        // Every CTA took items until the counter passed the last: the grid's first items are
        // theirs without a take, every other item one take, and each CTA's last take found none,
        // so the counter ends at the item count.
        if (work_counter) {
          const long long want = static_cast<long long>(blocks) * B * HK;
          if (counter != static_cast<unsigned>(want)) {
            run.failure = where + "the work counter ended at " + std::to_string(counter) + ", not the " +
                          std::to_string(want) + " items (over " + std::to_string(grid_x) + " CTAs)";
            return run;
          }
        }
        if (setup.count_reads) {
          const std::vector<int> view(q_positions.begin() + q0, q_positions.begin() + q0 + rows);
          // The view's reads sit at its rows of the rank's Q buffer: shift them to the view's start.
          const std::vector<uint32_t> view_reads(q_reads.begin() + q0 * q_st.row * 2 / 16, q_reads.end());
          const std::string bad =
              check_reads<Traits>(setup, view, kv_positions, view_reads, q_st, k_reads, v_reads, kv_st, skips);
          if (!bad.empty()) {
            run.failure = where + bad;
            return run;
          }
        }
      }
    }
    // The rank's out and lse into the whole-sequence result; padding must stay poisoned.
    for (int bt = 0; bt < B; ++bt)
      for (int h = 0; h < HQ; ++h)
        for (int i = 0; i < q_len; ++i) {
          const int64_t row = bt * q_st.batch + h * q_st.head + i * q_st.row;
          for (int d = 0; d < row_pitch(D); ++d) {
            const uint16_t bits = out[row + d];
            if (d >= D) {
              if (bits != testing::kPoison16 && run.failure.empty())
                run.failure = "rank " + std::to_string(r) + " wrote padding of head " + std::to_string(h) + " row " +
                              std::to_string(i);
              continue;
            }
            const double value = testing::from_bits(bits, dtype);
            if (!std::isfinite(value) && run.failure.empty())
              run.failure = "rank " + std::to_string(r) + " left out[head " + std::to_string(h) + " row " +
                            std::to_string(i) + " col " + std::to_string(d) + "] unwritten or not finite";
            run.result.out[((static_cast<size_t>(bt) * HQ + h) * S + q_positions[i]) * D + d] = value;
          }
          run.result.lse[(static_cast<size_t>(bt) * HQ + h) * S + q_positions[i]] =
              lse[(static_cast<size_t>(bt) * HQ + h) * q_len + i];
        }
  }
  return run;
}

// The whole-sequence float64 reference of the problem under the setup's mask.
inline AttentionOutput reference_of(const AttentionProblem& p, const AttentionShape& shape) {
  std::vector<int64_t> positions(static_cast<size_t>(p.seq_len));
  for (int i = 0; i < p.seq_len; ++i) positions[i] = i;
  const ReferenceForward ref = reference_forward(shape, p.q, p.k, p.v, positions, positions);
  return {ref.out, ref.lse};
}

inline AttentionShape shape_of(const AttentionProblem& p) {
  AttentionShape shape;
  shape.batch = p.batch;
  shape.q_heads = p.q_heads;
  shape.kv_heads = p.kv_heads;
  shape.head_dim = p.head_dim;
  shape.scale = p.softmax_scale;
  shape.causal = p.causal;
  return shape;
}

inline std::vector<std::vector<int>> partition(Scheme scheme, int seq_len, int cp_size,
                                        const std::vector<int64_t>& documents = {}) {
  std::vector<std::vector<int>> ranks;
  for (int r = 0; r < cp_size; ++r) {
    const std::vector<int64_t> positions = partition_positions(scheme, seq_len, cp_size, r, documents);
    ranks.emplace_back(positions.begin(), positions.end());
  }
  return ranks;
}

template <typename Traits>
void check_setup(const AttentionProblem& p, const AttentionOutput& expected, const RingSetup& setup,
                 SkipCounts* skips = nullptr) {
  testing::RingRun run = run_emulated<Traits>(p, setup, skips);
  ASSERT_TRUE(run.failure.empty()) << run.failure;
  const int n = static_cast<int>(setup.ranks.size());
  ASSERT_EQ(run.launches, n * n * (setup.query_split > 0 ? 2 : 1));
  testing::Comparison c = testing::compare(expected, run.result, p.head_dim);
  testing::expect_within_limit(c.out_rel_frobenius, testing::element_dtype<typename Traits::Element>(),
                               "out, worst " + c.worst, testing::kOutputUlps);
  testing::expect_within_limit(c.lse_max_abs, testing::element_dtype<typename Traits::Element>(), "lse");
}

enum class Split { kZigzag, kStriped, kZigzagToken };

template <typename Traits>
void check(const AttentionProblem& p, const AttentionOutput& expected, int cp_size, const std::string& what,
           Split split = Split::kZigzag) {
  SCOPED_TRACE(what + ", " + std::to_string(cp_size) + " ranks");
  RingSetup setup;
  setup.shape = shape_of(p);
  // striped: rank r holds r, r + N, r + 2N, ...: every causal tile straddles the diagonal.
  // zigzag-token: one token per fold of N, offsets r and N - 1 - r in turn: strides alternate.
  const Scheme scheme = split == Split::kStriped       ? Scheme::kStriped
                        : split == Split::kZigzagToken ? Scheme::kZigzagToken
                                                       : Scheme::kZigzag;
  setup.ranks = partition(scheme, p.seq_len, cp_size);
  check_setup<Traits>(p, expected, setup);
}

template <typename Traits>
void check_random(int batch, int kv_heads, int seq_len, uint32_t seed, int cp_size, Split split = Split::kZigzag) {
  AttentionProblem p = testing::random_problem(batch, kv_heads * Traits::kGroup, kv_heads, Traits::kHeadDim, seq_len,
                                               Traits::kCausal, seed);
  check<Traits>(p, testing::reference_attention(p), cp_size, "random", split);
}

// The problem over a zigzag ring of `cp_size` ranks with every launch's TMA reads checked against
// the tile contract (a persistent kernel over `resident_ctas` CTAs, its pairs in L2 sections of
// `section_pairs`); returns what the checks saw.
template <typename Traits>
SkipCounts check_zigzag_reads(const AttentionProblem& p, int cp_size, int resident_ctas = 3, int section_pairs = 2) {
  RingSetup setup;
  setup.shape = shape_of(p);
  setup.ranks = partition(Scheme::kZigzag, p.seq_len, cp_size);
  setup.count_reads = true;
  setup.resident_ctas = resident_ctas;
  setup.section_pairs = section_pairs;
  SkipCounts skips;
  check_setup<Traits>(p, testing::reference_attention(p), setup, &skips);
  return skips;
}

// Packed documents (one of a single token, one empty) that no ring size divides, under a causal
// sliding window of 40 and a softcap of 2 (logits reach about +-3 in the random problems, so the
// tanh bends them), over a zigzag ring of three (ranks hold 99 to 101 of the 300 tokens), with
// the TMA reads checked against the tile contract. The problem must be causal with 300 tokens.
template <typename Traits>
void check_documents_window_softcap_ring(const AttentionProblem& p, SkipCounts* skips) {
  ASSERT_EQ(p.seq_len, 300);
  RingSetup setup;
  setup.shape = shape_of(p);
  setup.shape.window_left = 40;
  setup.shape.softcap = 2.0;
  const std::vector<int64_t> documents = {130, 1, 0, 169};
  setup.shape.cu_seqlens = cu_seqlens_of(documents);
  setup.ranks = partition(Scheme::kZigzag, p.seq_len, 3, documents);
  setup.count_reads = true;
  check_setup<Traits>(p, reference_of(p, setup.shape), setup, skips);
}

// One reference vector case over a zigzag ring of 2 when the kernel matches its head dim, mask
// and group; false (nothing run) otherwise.
template <typename Traits>
bool try_vector_case(const AttentionProblem& p, const AttentionOutput& expected, const std::string& name) {
  // A kernel with key intervals takes causal or not from them; one with a softcap needs one.
  const bool mask_matches = Traits::kKeyIntervals ? !Traits::kSoftcap : p.causal == Traits::kCausal;
  if (p.head_dim != Traits::kHeadDim || !mask_matches || p.q_heads != p.kv_heads * Traits::kGroup ||
      p.seq_len % 4 != 0)
    return false;
  check<Traits>(p, expected, 2, name);
  return true;
}

// Every reference vector case without a window (the project's set and, when present,
// $CPGEN_VECTORS_DIR and ../shared/vectors) over a zigzag ring of 2, each through the first of
// Kernels that matches its head dim, mask and group; the rest are listed as skipped.
struct VectorRun {
  int ran = 0, repo_ran = 0;  // cases run, of which the project's own ("repo_...")
  std::string skipped;        // names of the cases no kernel matched, space separated
};

template <typename... Kernels>
VectorRun run_vector_cases() {
  VectorRun run;
  for (const std::string& path : testing::vector_files()) {
    const std::string name = testing::vector_case_name(path);
    if (!testing::load_json(path).at("window").is_null()) {
      run.skipped += " " + name;
      continue;
    }
    AttentionOutput expected;
    const AttentionProblem p = testing::load_vector_case(path, &expected);
    if (!(try_vector_case<Kernels>(p, expected, name) || ...)) {
      run.skipped += " " + name;
      continue;
    }
    ++run.ran;
    if (name.rfind("repo_", 0) == 0) ++run.repo_ran;
  }
  return run;
}

}  // namespace cpgen::wgmma_harness
