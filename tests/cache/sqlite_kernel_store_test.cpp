#include <gtest/gtest.h>

#include <thread>

#include "cache/database.h"
#include "cache/sqlite_kernel_store.h"
#include "cache_fixtures.h"

namespace cpgen::testing {
namespace {

class SqliteKernelStoreTest : public TempDirTest {};

CompiledKernel kernel(const std::string& key, const std::string& cubin) {
  CompiledKernel k;
  k.key = key;
  k.uri = "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2";
  k.arch = "sm_90a";
  k.cubin = cubin;
  k.stats.registers = 168;
  k.stats.spill_bytes = 0;
  k.stats.stack_bytes = 16;
  k.stats.shared_bytes = 0;
  k.stats.compile_ms = 812.5;
  k.log = "ptxas info: Used 168 registers";
  return k;
}

TEST_F(SqliteKernelStoreTest, PutGetAcrossConnectionsAndThreads) {
  SqliteKernelStore writer(path("k.db"));
  std::string cubin("\x7f" "ELF\0\1\2binary", 13);  // embedded NUL bytes survive
  writer.put(kernel("key-a", cubin));
  SqliteKernelStore reader(path("k.db"));  // another connection, as another process would have
  auto got = reader.get("key-a");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->cubin, cubin);
  EXPECT_EQ(got->stats.registers, 168);
  EXPECT_EQ(got->stats.stack_bytes, 16);
  EXPECT_EQ(got->stats.cubin_bytes, 13);
  EXPECT_TRUE(got->stats.from_store);
  EXPECT_EQ(got->log, "ptxas info: Used 168 registers");
  EXPECT_FALSE(reader.get("missing"));
  // The compile pool's threads share one store.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) writer.put(kernel("key-" + std::to_string(t) + "-" + std::to_string(i), "c"));
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 10; ++i) EXPECT_TRUE(reader.get("key-" + std::to_string(t) + "-" + std::to_string(i)));
  // A put replaces; a damaged stats row reads as absent.
  writer.put(kernel("key-a", "new"));
  EXPECT_EQ(reader.get("key-a")->cubin, "new");
  Database raw(path("k.db"));
  raw.exec("UPDATE kernels SET stats = '{broken' WHERE key = 'key-a'");
  EXPECT_FALSE(reader.get("key-a"));
}

// SQLite's own checks never look inside a blob: a flipped cubin byte or a changed stat of a row
// reads as absent by the row's checksum (a damaged cubin was served before), and put repairs it.
TEST_F(SqliteKernelStoreTest, ADamagedCubinOrStatReadsAsAbsent) {
  SqliteKernelStore store(path("k.db"));
  const std::string cubin(4096, 'c');
  store.put(kernel("key", cubin));
  ASSERT_TRUE(store.get("key"));
  {
    Database raw(path("k.db"));
    std::string damaged = cubin;
    damaged[3000] ^= 0x01;
    Statement update = raw.prepare("UPDATE kernels SET cubin = ? WHERE key = 'key'");
    update.bind_blob(1, damaged);
    update.run();
  }
  EXPECT_FALSE(store.get("key"));
  store.put(kernel("key", cubin));
  ASSERT_TRUE(store.get("key"));
  {
    Database raw(path("k.db"));
    raw.exec("UPDATE kernels SET stats = replace(stats, '\"spill_bytes\":0', '\"spill_bytes\":8') WHERE key = 'key'");
  }
  EXPECT_FALSE(store.get("key"));
}

}  // namespace
}  // namespace cpgen::testing
