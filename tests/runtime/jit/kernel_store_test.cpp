// The directory kernel store on synthetic entries (no NVRTC): round trips, damage detection,
// atomic publication under concurrent writers and readers, and the default location.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "cpgen/error.h"
#include "runtime/jit/kernel_store.h"
#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

using testing::TempDir;
using testing::slurp;

CompiledKernel make_kernel(const std::string& key, char fill, size_t cubin_bytes) {
  CompiledKernel k;
  k.uri = "ring_fwd_bf16_hd128_causal_gqa1_bm128_bn64_w4_s2";
  k.arch = "sm_90a";
  k.key = key;
  k.cubin = std::string(cubin_bytes, fill);
  k.cubin[0] = '\x7f';  // bytes of every value, including NUL and newline, must survive
  if (cubin_bytes > 3) {
    k.cubin[1] = '\0';
    k.cubin[2] = '\n';
  }
  k.log = "ptxas info    : Used 96 registers\nline two \"quoted\"";
  k.stats = {96, 8, 16, 1024, static_cast<int>(cubin_bytes), 412.5, false};
  return k;
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

TEST(KernelStore, PutThenGetRoundTripsEveryField) {
  TempDir dir("store");
  DirectoryKernelStore store(dir.path() + "/nested/kernels");  // created on first put
  CompiledKernel k = make_kernel("k1", 'a', 5000);
  store.put(k);
  auto got = store.get("k1");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->uri, k.uri);
  EXPECT_EQ(got->arch, k.arch);
  EXPECT_EQ(got->key, "k1");
  EXPECT_EQ(got->cubin, k.cubin);
  EXPECT_EQ(got->log, k.log);
  EXPECT_EQ(got->stats.registers, 96);
  EXPECT_EQ(got->stats.spill_bytes, 8);
  EXPECT_EQ(got->stats.stack_bytes, 16);
  EXPECT_EQ(got->stats.shared_bytes, 1024);
  EXPECT_EQ(got->stats.cubin_bytes, 5000);
  EXPECT_DOUBLE_EQ(got->stats.compile_ms, 412.5);
  EXPECT_TRUE(got->stats.from_store);
  EXPECT_FALSE(store.get("k2").has_value());
  EXPECT_EQ(files_in(store.dir()).size(), 1u);  // no temporary file left behind
}

TEST(KernelStore, DamagedEntriesReadAsAbsentAndPutRepairsThem) {
  TempDir dir("store");
  DirectoryKernelStore store(dir.path());
  CompiledKernel k = make_kernel("key", 'b', 4096);
  store.put(k);
  const std::string path = store.entry_path("key");
  const std::string good = slurp(path);

  spit(path, good.substr(0, good.size() - 1));  // truncated cubin
  EXPECT_FALSE(store.get("key").has_value());
  spit(path, good.substr(0, 30));  // truncated inside the metadata
  EXPECT_FALSE(store.get("key").has_value());
  spit(path, "");  // empty file, as a crash before any write would leave
  EXPECT_FALSE(store.get("key").has_value());
  std::string flipped = good;
  flipped.back() ^= 0x40;  // one damaged cubin byte: the checksum catches it
  spit(path, flipped);
  EXPECT_FALSE(store.get("key").has_value());
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  spit(path, bad_magic);
  EXPECT_FALSE(store.get("key").has_value());
  spit(path, good + "extra");  // trailing bytes: size mismatch
  EXPECT_FALSE(store.get("key").has_value());

  // A flipped bit in the metadata line (spill_bytes 8 -> 0, one bit: 0x38 -> 0x30): format 2's
  // checksum covered the cubin only, and the changed stat was served.
  std::string header_bit = good;
  const size_t spill = header_bit.find("\"spill_bytes\":8");
  ASSERT_NE(spill, std::string::npos) << good.substr(0, 300);
  header_bit[spill + 14] ^= 0x08;
  ASSERT_EQ(header_bit.substr(spill, 15), "\"spill_bytes\":0");
  spit(path, header_bit);
  EXPECT_FALSE(store.get("key").has_value());

  // An entry copied under another key's name is not that key's kernel.
  spit(store.entry_path("other"), good);
  EXPECT_FALSE(store.get("other").has_value());

  store.put(k);
  auto repaired = store.get("key");
  ASSERT_TRUE(repaired.has_value());
  EXPECT_EQ(repaired->cubin, k.cubin);
}

// An entry is loaded into the GPU (an emulated kernel's is a shared object this process runs):
// one that someone else may write, or that another user owns, reads as absent and the next put
// replaces it. Before, any file with a right checksum (which detects damage, not tampering) was
// loaded, also from a store folder that other users may write.
TEST(KernelStore, AnEntryOthersMayWriteOrAnotherUserOwnsReadsAsAbsent) {
  TempDir dir("store");
  DirectoryKernelStore store(dir.path());
  const CompiledKernel k = make_kernel("key", 'c', 2048);
  store.put(k);
  const std::string path = store.entry_path("key");
  ASSERT_TRUE(store.get("key").has_value());
  for (mode_t mode : {0664, 0646, 0666}) {
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
    EXPECT_FALSE(store.get("key").has_value()) << std::oct << mode;
  }
  ASSERT_EQ(::chmod(path.c_str(), 0444), 0);
  EXPECT_TRUE(store.get("key").has_value()) << "read-only for everyone is fine";
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
    EXPECT_FALSE(store.get("key").has_value()) << "owned by another user";
  }
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  store.put(k);
  ASSERT_TRUE(store.get("key").has_value()) << "the put replaced it";
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_EQ(st.st_mode & 022, 0u);
}

// An entry far larger than any kernel reads as absent without being read into memory whole (a
// 1 TB file was: std::bad_alloc on every lookup, never replaced), and the next put replaces it.
TEST(KernelStore, AnOversizedEntryReadsAsAbsentAndPutReplacesIt) {
  TempDir dir("store");
  DirectoryKernelStore store(dir.path());
  const CompiledKernel k = make_kernel("key", 'd', 1024);
  store.put(k);
  std::filesystem::resize_file(store.entry_path("key"), std::uintmax_t{1} << 40);  // sparse
  EXPECT_FALSE(store.get("key").has_value());
  store.put(k);
  ASSERT_TRUE(store.get("key").has_value());
  EXPECT_EQ(store.get("key")->cubin, k.cubin);
}

// A log with bytes that are not UTF-8 (a template's #warning text) is stored with U+FFFD in their
// place. Before, the metadata's dump threw a JSON type error out of put.
TEST(KernelStore, ALogThatIsNotUtf8IsStored) {
  TempDir dir("store");
  DirectoryKernelStore store(dir.path());
  CompiledKernel k = make_kernel("key", 'e', 512);
  k.log = "warning: caf\xe9 \xff\xfe";
  EXPECT_NO_THROW(store.put(k));
  const std::optional<CompiledKernel> got = store.get("key");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->log, "warning: caf\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(got->cubin, k.cubin);
}

// Only a regular file is an entry: a FIFO at an entry's name reads as absent at once (its open
// blocked forever before), as does a folder.
TEST(KernelStore, AnEntryThatIsNotARegularFileReadsAsAbsentWithoutBlocking) {
  TempDir dir("store");
  DirectoryKernelStore store(dir.path());
  ASSERT_EQ(::mkfifo(store.entry_path("fifo").c_str(), 0644), 0);
  EXPECT_FALSE(store.get("fifo").has_value());
  std::filesystem::create_directory(store.entry_path("folder"));
  EXPECT_FALSE(store.get("folder").has_value());
}

// A writer killed between its create and its rename leaves a temporary file; the first put of a
// process removes those older than an hour and leaves younger ones (a live writer's) alone.
TEST(KernelStore, TheFirstPutRemovesStaleTemporaryFiles) {
  TempDir dir("store");
  DirectoryKernelStore store(dir.path());
  const std::string stale = store.entry_path("a") + ".tmp.123.00000000deadbeef.0";
  const std::string fresh = store.entry_path("b") + ".tmp.456.00000000deadbeef.0";
  spit(stale, "partial");
  spit(fresh, "partial");
  std::filesystem::last_write_time(stale, std::filesystem::file_time_type::clock::now() - std::chrono::hours(2));
  store.put(make_kernel("k", 'c', 100));
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(fresh));
  EXPECT_TRUE(store.get("k").has_value());
}

TEST(KernelStore, ConcurrentWritersNeverExposeAPartialEntry) {
  // Writers replace one key with two different 2 MB entries while readers keep reading it: a
  // reader must see nothing (before the first rename) or one complete version, never a mix.
  TempDir dir("store");
  DirectoryKernelStore store(dir.path());
  const CompiledKernel a = make_kernel("hot", 'a', 2 << 20);
  const CompiledKernel b = make_kernel("hot", 'b', 2 << 20);
  std::atomic<bool> stop{false};
  std::atomic<int> complete_reads{0}, bad_reads{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < 12; ++i) store.put(w == 0 ? a : b);
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        auto got = store.get("hot");
        if (!got) continue;
        if (got->cubin == a.cubin || got->cubin == b.cubin) ++complete_reads; else ++bad_reads;
      }
    });
  }
  threads[0].join();
  threads[1].join();
  stop = true;
  threads[2].join();
  threads[3].join();
  EXPECT_EQ(bad_reads.load(), 0);
  EXPECT_GT(complete_reads.load(), 0);
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"hot.cpgenk"});
}

TEST(KernelStore, PutIntoAnUnwritableLocationThrowsIo) {
  TempDir dir("store");
  const std::string blocker = dir.path() + "/file";
  spit(blocker, "not a directory");
  DirectoryKernelStore store(blocker + "/kernels");
  try {
    store.put(make_kernel("k", 'c', 10));
    FAIL() << "put into a path under a regular file succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find(blocker), std::string::npos) << e.what();
  }
}

TEST(KernelStore, DefaultDirectoryFollowsEnvironmentPrecedence) {
  testing::ScopedEnv env;
  env.set("CPGEN_KERNEL_DIR", "/tmp/explicit");
  env.set("XDG_CACHE_HOME", "/tmp/xdg");
  env.set("HOME", "/tmp/home");
  EXPECT_EQ(default_kernel_dir(), "/tmp/explicit");
  env.set("CPGEN_KERNEL_DIR", nullptr);
  EXPECT_EQ(default_kernel_dir(), "/tmp/xdg/cpgen/kernels");
  env.set("XDG_CACHE_HOME", "");
  EXPECT_EQ(default_kernel_dir(), "/tmp/home/.cache/cpgen/kernels");
  // Neither: a folder of this user's own under the temporary directory, never one shared by all.
  TempDir tmp("tmpdir");
  env.set("HOME", nullptr);
  env.set("TMPDIR", tmp.path().c_str());
  EXPECT_EQ(default_kernel_dir(), tmp.path() + "/cpgen-" + std::to_string(::getuid()) + "/kernels");
  env.set("TMPDIR", nullptr);

  TempDir dir("store");
  env.set("CPGEN_KERNEL_DIR", dir.path().c_str());
  KernelStore* store = default_kernel_store();
  EXPECT_EQ(store, default_kernel_store());  // one store per directory per process
  EXPECT_EQ(store->describe(), "directory " + dir.path());
}

}  // namespace
}  // namespace cpgen
