// Partition schemes against partitions.json of every vector set (tests/test_util.h), plus inverse
// and scatter/gather.
#include "runtime/ring/partition.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>

#include "cpgen/error.h"
#include "test_util.h"

namespace cpgen {
namespace {

// Every set's cases, each with the file it came from.
std::vector<std::pair<std::string, nlohmann::json>> partition_cases() {
  std::vector<std::pair<std::string, nlohmann::json>> cases;
  for (const std::string& file : testing::partition_files()) {
    const nlohmann::json doc = testing::load_json(file);  // kept alive while its cases are read
    for (const auto& c : doc.at("cases")) cases.emplace_back(file, c);
  }
  return cases;
}

TEST(Partition, ReproducesEveryReferenceCase) {
  for (const std::string& file : testing::partition_files()) {
    SCOPED_TRACE(file);
    ASSERT_GE(testing::load_json(file).at("cases").size(), 20u);
  }
  std::set<std::string> schemes_seen;
  for (const auto& [file, c] : partition_cases()) {
    SCOPED_TRACE(file);
    const Scheme scheme = parse_scheme(c.at("scheme").get<std::string>());
    schemes_seen.insert(c.at("scheme").get<std::string>());
    const int64_t seq_len = c.at("seq_len").get<int64_t>();
    const int cp_size = c.at("cp_size").get<int>();
    const auto& expected = c.at("positions");
    ASSERT_EQ(static_cast<int>(expected.size()), cp_size);
    for (int r = 0; r < cp_size; ++r) {
      EXPECT_EQ(partition_positions(scheme, seq_len, cp_size, r, {}),
                expected[r].get<std::vector<int64_t>>())
          << c.at("scheme") << " seq_len=" << seq_len << " cp_size=" << cp_size << " rank=" << r;
    }
  }
  EXPECT_EQ(schemes_seen.size(), 4u);
}

TEST(Partition, OwnerInvertsPositions) {
  for (const auto& [file, c] : partition_cases()) {
    SCOPED_TRACE(file);
    const Scheme scheme = parse_scheme(c.at("scheme").get<std::string>());
    const int64_t seq_len = c.at("seq_len").get<int64_t>();
    const int cp_size = c.at("cp_size").get<int>();
    std::vector<int> covered(seq_len, 0);
    for (int r = 0; r < cp_size; ++r) {
      const auto positions = partition_positions(scheme, seq_len, cp_size, r, {});
      ASSERT_EQ(static_cast<int64_t>(positions.size()), seq_len / cp_size);
      for (size_t i = 0; i < positions.size(); ++i) {
        if (i > 0) EXPECT_LT(positions[i - 1], positions[i]) << "positions must increase";
        const PositionOwner owner = position_owner(scheme, seq_len, cp_size, positions[i]);
        EXPECT_EQ(owner.rank, r) << c.at("scheme") << " position " << positions[i];
        EXPECT_EQ(owner.local_index, static_cast<int64_t>(i)) << c.at("scheme");
        ++covered[positions[i]];
      }
    }
    for (int64_t p = 0; p < seq_len; ++p) EXPECT_EQ(covered[p], 1) << "position " << p;
  }
}

TEST(Partition, LargerLayoutsAreBijections) {
  for (Scheme scheme : {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken,
                        Scheme::kStriped}) {
    const int64_t seq_len = 4096;
    for (int cp_size : {1, 2, 4, 8, 16}) {
      std::vector<int> covered(seq_len, 0);
      for (int r = 0; r < cp_size; ++r) {
        const auto positions = partition_positions(scheme, seq_len, cp_size, r, {});
        for (size_t i = 0; i < positions.size(); ++i) {
          ++covered[positions[i]];
          const PositionOwner o = position_owner(scheme, seq_len, cp_size, positions[i]);
          ASSERT_EQ(o.rank, r);
          ASSERT_EQ(o.local_index, static_cast<int64_t>(i));
        }
      }
      EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), seq_len)
          << scheme_name(scheme) << " cp_size " << cp_size;
    }
  }
}

TEST(Partition, ScatterGatherRoundTrip) {
  const int64_t batch = 2, heads = 3, seq_len = 48, dim = 5;
  std::vector<double> full(batch * heads * seq_len * dim);
  std::iota(full.begin(), full.end(), 0.5);
  for (Scheme scheme : {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken,
                        Scheme::kStriped}) {
    for (int cp_size : {1, 2, 3, 4, 8}) {
      if (seq_len % (scheme == Scheme::kZigzag ? 2 * cp_size : cp_size) != 0) continue;
      std::vector<std::vector<double>> shards;
      for (int r = 0; r < cp_size; ++r) {
        shards.push_back(scatter_shard(full, batch, heads, seq_len, dim, scheme, cp_size, r, {}));
        // Element (b, h, i, d) of the shard is element (b, h, positions[i], d) of the full one.
        const auto positions = partition_positions(scheme, seq_len, cp_size, r, {});
        const int64_t local = seq_len / cp_size;
        for (int64_t bh = 0; bh < batch * heads; ++bh)
          for (int64_t i = 0; i < local; ++i)
            for (int64_t d = 0; d < dim; ++d)
              ASSERT_EQ(shards.back()[(bh * local + i) * dim + d],
                        full[(bh * seq_len + positions[i]) * dim + d]);
      }
      EXPECT_EQ(gather_shards(shards, batch, heads, seq_len, dim, scheme, cp_size, {}), full)
          << scheme_name(scheme) << " cp_size " << cp_size;

      std::vector<float> full_f(full.begin(), full.end());
      std::vector<std::vector<float>> shards_f;
      for (int r = 0; r < cp_size; ++r)
        shards_f.push_back(scatter_shard(full_f, batch, heads, seq_len, dim, scheme, cp_size, r, {}));
      EXPECT_EQ(gather_shards(shards_f, batch, heads, seq_len, dim, scheme, cp_size, {}), full_f);
    }
  }
}

std::string bad_input_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    return e.what();
  }
  ADD_FAILURE() << "expected Error(kBadInput)";
  return "";
}

// check_partitionable states what the GPU kernels need (equal shards); the partition itself
// takes any length (PartitionVarlen below).
TEST(Partition, RejectsLengthsTheSchemeCannotSplitEvenly) {
  EXPECT_EQ(bad_input_message([] { check_partitionable(Scheme::kZigzag, 100, 8); }),
            "zigzag needs seq_len divisible by 2*cp_size (16); got 100");
  EXPECT_EQ(bad_input_message([] { check_partitionable(Scheme::kContiguous, 10, 3); }),
            "contiguous needs seq_len divisible by cp_size (3); got 10");
  EXPECT_EQ(partition_positions(Scheme::kContiguous, 10, 3, 0, {}), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(bad_input_message([] { check_partitionable(Scheme::kStriped, 10, 4); }),
            "striped needs seq_len divisible by cp_size (4); got 10");
  EXPECT_EQ(bad_input_message([] { check_partitionable(Scheme::kZigzagToken, 7, 2); }),
            "zigzag-token needs seq_len divisible by cp_size (2); got 7");
  EXPECT_NE(bad_input_message([] { check_partitionable(Scheme::kZigzag, 16, 0); }).find("cp_size"),
            std::string::npos);
  EXPECT_NE(bad_input_message([] { partition_positions(Scheme::kZigzag, 16, 2, 2, {}); }).find("rank 2"),
            std::string::npos);
  EXPECT_NE(bad_input_message([] { position_owner(Scheme::kStriped, 16, 2, 16); }).find("position 16"),
            std::string::npos);
  EXPECT_NE(bad_input_message([] {
              scatter_shard(std::vector<double>(10), 1, 1, 16, 1, Scheme::kStriped, 2, 0, {});
            }).find("10 elements"),
            std::string::npos);
  EXPECT_NE(bad_input_message([] {
              gather_shards(std::vector<std::vector<float>>(3), 1, 1, 16, 1, Scheme::kStriped, 2, {});
            }).find("3 shards"),
            std::string::npos);
}

}  // namespace
}  // namespace cpgen

namespace cpgen {
namespace {

// Varlen partitions: each document split on its own, no divisibility rule.
struct VarlenCase {
  std::vector<int64_t> documents;
  int cp_size;
};

const VarlenCase kVarlenCases[] = {
    {{37, 91, 1, 99}, 3}, {{70, 0, 58}, 5}, {{13, 50, 33}, 8}, {{144}, 5}, {{0, 1, 0, 1, 7}, 2},
    {{229}, 8},           {{5}, 8},         {{0}, 3},          {{1, 2, 3, 4, 5, 6, 7}, 3}};

int64_t total_of(const std::vector<int64_t>& documents) {
  return std::accumulate(documents.begin(), documents.end(), int64_t{0});
}

TEST(PartitionVarlen, EveryPositionOnceAndEachRankIncreasing) {
  for (const VarlenCase& c : kVarlenCases)
    for (Scheme scheme : {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken, Scheme::kStriped}) {
      const int64_t seq_len = total_of(c.documents);
      SCOPED_TRACE(std::string(scheme_name(scheme)) + " N=" + std::to_string(c.cp_size) + " seq_len " +
                   std::to_string(seq_len));
      std::vector<int> owners(static_cast<size_t>(seq_len), 0);
      for (int r = 0; r < c.cp_size; ++r) {
        const auto positions = partition_positions(scheme, seq_len, c.cp_size, r, c.documents);
        for (size_t i = 0; i < positions.size(); ++i) {
          ASSERT_GE(positions[i], 0);
          ASSERT_LT(positions[i], seq_len);
          if (i > 0) ASSERT_LT(positions[i - 1], positions[i]);
          owners[positions[i]]++;
        }
      }
      for (int64_t p = 0; p < seq_len; ++p) ASSERT_EQ(owners[p], 1) << "position " << p;
    }
}

// partition_rows counts what partition_positions lists, per document, for every scheme and rank:
// the cases above, every single document up to 70 tokens over 1-9 ranks, and a 2^40-token
// sequence (2^39 per rank of two) that listing could not count.
TEST(PartitionVarlen, RowCountsAreThePositionsCounted) {
  auto check = [](const std::vector<int64_t>& documents, int cp_size) {
    const int64_t seq_len = total_of(documents);
    for (Scheme scheme : {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken, Scheme::kStriped})
      for (int r = 0; r < cp_size; ++r)
        ASSERT_EQ(partition_rows(scheme, seq_len, cp_size, r, documents),
                  static_cast<int64_t>(partition_positions(scheme, seq_len, cp_size, r, documents).size()))
            << scheme_name(scheme) << " N=" << cp_size << " rank " << r << " seq_len " << seq_len;
  };
  for (const VarlenCase& c : kVarlenCases) check(c.documents, c.cp_size);
  for (int64_t length = 0; length <= 70; ++length)
    for (int cp_size = 1; cp_size <= 9; ++cp_size) check({length}, cp_size);
  for (Scheme scheme : {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken, Scheme::kStriped})
    EXPECT_EQ(partition_rows(scheme, int64_t{1} << 40, 2, 1, {}), int64_t{1} << 39) << scheme_name(scheme);
  EXPECT_THROW(partition_rows(Scheme::kZigzag, 100, 4, 4, {}), Error);
}

// partition_rows_all counts what partition_positions lists for every rank, and
// partition_positions_all lists it, in its order, for every scheme: the
// cases above, every single document up to 70 tokens over 1-9 ranks, random lists of documents
// (empty ones too), and 2^20 documents over 1024 ranks, whose rows add up to the sequence.
TEST(PartitionVarlen, EveryRanksRowCountsAtOnceAreEachRanks) {
  const Scheme schemes[] = {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken, Scheme::kStriped};
  auto check = [&](const std::vector<int64_t>& documents, int cp_size) {
    const int64_t seq_len = total_of(documents);
    for (Scheme scheme : schemes) {
      const std::vector<int64_t> all = partition_rows_all(scheme, seq_len, cp_size, documents);
      ASSERT_EQ(all.size(), static_cast<size_t>(cp_size));
      const std::vector<std::vector<int64_t>> positions = partition_positions_all(scheme, seq_len, cp_size, documents);
      ASSERT_EQ(positions.size(), static_cast<size_t>(cp_size));
      for (int r = 0; r < cp_size; ++r) {
        const std::vector<int64_t> listed = partition_positions(scheme, seq_len, cp_size, r, documents);
        ASSERT_EQ(all[r], static_cast<int64_t>(listed.size()))
            << scheme_name(scheme) << " N=" << cp_size << " rank " << r << " seq_len " << seq_len;
        ASSERT_EQ(positions[r], listed) << scheme_name(scheme) << " N=" << cp_size << " rank " << r;
      }
    }
  };
  for (const VarlenCase& c : kVarlenCases) check(c.documents, c.cp_size);
  for (int64_t length = 0; length <= 70; ++length)
    for (int cp_size = 1; cp_size <= 9; ++cp_size) check({length}, cp_size);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> documents(1 + rng() % 12);
    for (int64_t& d : documents) d = rng() % 40;
    check(documents, 1 + static_cast<int>(rng() % 9));
  }
  const std::vector<int64_t> many(int64_t{1} << 20, 3);
  for (Scheme scheme : schemes) {
    const std::vector<int64_t> rows = partition_rows_all(scheme, 3 << 20, 1024, many);
    EXPECT_EQ(std::accumulate(rows.begin(), rows.end(), int64_t{0}), int64_t{3} << 20) << scheme_name(scheme);
  }
  EXPECT_THROW(partition_rows_all(Scheme::kZigzag, 10, 0, {}), Error);
  EXPECT_THROW(partition_rows_all(Scheme::kZigzag, 10, 2, {3, 3}), Error);  // does not sum to seq_len
}

// document_offset_owner names the rank partition_positions gives each offset of a document, and
// RankRowCounts's prefix counts are the positions each rank holds among a document's first offsets:
// every scheme, every document up to 40 tokens over 1-9 ranks, every prefix.
TEST(PartitionVarlen, OffsetOwnersAndPrefixCountsAreThePositions) {
  for (Scheme scheme : {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken, Scheme::kStriped})
    for (int64_t length = 1; length <= 40; ++length)
      for (int n = 1; n <= 9; ++n) {
        SCOPED_TRACE(std::string(scheme_name(scheme)) + " length " + std::to_string(length) + " N=" + std::to_string(n));
        std::vector<int> owner(static_cast<size_t>(length), -1);
        for (int r = 0; r < n; ++r)
          for (int64_t position : partition_positions(scheme, length, n, r, {})) owner[static_cast<size_t>(position)] = r;
        for (int64_t offset = 0; offset < length; ++offset)
          ASSERT_EQ(document_offset_owner(scheme, length, n, offset), owner[static_cast<size_t>(offset)]) << offset;
        for (int64_t count = 0; count <= length; ++count) {
          RankRowCounts prefix(scheme, n);
          prefix.add_prefix(length, count, 1);
          std::vector<int64_t> want(static_cast<size_t>(n), 0);
          for (int64_t offset = 0; offset < count; ++offset) ++want[static_cast<size_t>(owner[static_cast<size_t>(offset)])];
          ASSERT_EQ(prefix.counts(), want) << "first " << count;
        }
      }
}

// Within every document, what each rank gets differs by at most one token between ranks. For
// zigzag too: with the first L mod 2N chunks one longer, rank r's chunks r and 2N-1-r hold
// together either [r < m] or 1 + [r > 2N-1-m] extra tokens, m = L mod 2N.
TEST(PartitionVarlen, RanksOfADocumentDifferByAtMostOneToken) {
  for (const VarlenCase& c : kVarlenCases)
    for (Scheme scheme : {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken, Scheme::kStriped}) {
      const int64_t seq_len = total_of(c.documents);
      SCOPED_TRACE(std::string(scheme_name(scheme)) + " N=" + std::to_string(c.cp_size));
      std::vector<std::vector<int64_t>> positions;
      for (int r = 0; r < c.cp_size; ++r)
        positions.push_back(partition_positions(scheme, seq_len, c.cp_size, r, c.documents));
      int64_t start = 0;
      for (int64_t length : c.documents) {
        int64_t least = length, most = 0;
        for (const auto& rank : positions) {
          const int64_t count = std::count_if(rank.begin(), rank.end(), [&](int64_t p) {
            return p >= start && p < start + length;
          });
          least = std::min(least, count);
          most = std::max(most, count);
        }
        EXPECT_LE(most - least, 1) << "document at " << start;
        start += length;
      }
    }
}

TEST(PartitionVarlen, ZigzagCutsEachDocumentIn2NChunks) {
  // Document {0..9} and {10..12} over 2 ranks: 4 chunks each, sizes 3 3 2 2 and 1 1 1 0.
  const std::vector<int64_t> docs = {10, 3};
  EXPECT_EQ(partition_positions(Scheme::kZigzag, 13, 2, 0, docs),
            (std::vector<int64_t>{0, 1, 2, 8, 9, 10}));
  EXPECT_EQ(partition_positions(Scheme::kZigzag, 13, 2, 1, docs),
            (std::vector<int64_t>{3, 4, 5, 6, 7, 11, 12}));
  // Without documents an indivisible length is cut the same way: sizes 2 2 1 1 over 2 ranks.
  EXPECT_EQ(partition_positions(Scheme::kZigzag, 6, 2, 0, {}), (std::vector<int64_t>{0, 1, 5}));
  EXPECT_EQ(partition_positions(Scheme::kZigzagToken, 5, 2, 1, {}), (std::vector<int64_t>{1, 2}));
}

TEST(PartitionVarlen, EqualToTheEvenLayoutWhenLengthsDivide) {
  for (Scheme scheme : {Scheme::kContiguous, Scheme::kZigzag, Scheme::kZigzagToken, Scheme::kStriped})
    for (int n : {1, 2, 4})
      for (int r = 0; r < n; ++r)
        EXPECT_EQ(partition_positions(scheme, 48, n, r, {48}), partition_positions(scheme, 48, n, r, {}));
}

TEST(PartitionVarlen, ScatterGatherRoundTripWithUnequalShards) {
  const std::vector<int64_t> docs = {7, 0, 1, 9};
  const int64_t seq = 17, batch = 2, heads = 3, dim = 2;
  std::vector<double> full(static_cast<size_t>(batch * heads * seq * dim));
  std::iota(full.begin(), full.end(), 0.5);
  std::vector<std::vector<double>> shards;
  std::set<size_t> sizes;
  for (int r = 0; r < 3; ++r) {
    shards.push_back(scatter_shard(full, batch, heads, seq, dim, Scheme::kZigzag, 3, r, docs));
    sizes.insert(shards.back().size());
  }
  EXPECT_GT(sizes.size(), 1u);  // the ranks really hold different token counts
  EXPECT_EQ(gather_shards(shards, batch, heads, seq, dim, Scheme::kZigzag, 3, docs), full);
}

TEST(PartitionVarlen, RefusesDocumentsThatDoNotSumToSeqLen) {
  try {
    partition_positions(Scheme::kZigzag, 10, 2, 0, {4, 5});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_STREQ(e.what(), "partition: documents sum to 9; seq_len is 10");
  }
  EXPECT_THROW(partition_positions(Scheme::kStriped, 3, 2, 0, {4, -1}), Error);
}

}  // namespace
}  // namespace cpgen
