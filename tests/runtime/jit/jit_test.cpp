// NVRTC compilation through the store. Runs without a GPU: NVRTC only needs the toolkit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "cpgen/error.h"
#include "generator/render.h"
#include "runtime/jit/jit.h"
#include "templates/params.cuh"
#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

using testing::TempDir;
using testing::slurp;

bool is_elf(const std::string& bytes) { return bytes.size() > 4 && bytes.compare(0, 4, "\x7f" "ELF") == 0; }

TEST(Jit, CompilesTheDefaultKernelForEverySupportedArch) {
  TempDir dir("jit");
  DirectoryKernelStore store(dir.path());
  KernelSpec spec = KernelSpec::default_for(Dtype::kBf16, 64, true, 1);
  std::vector<std::string> keys;
  for (std::string_view arch : kSupportedArchs) {
    CompiledKernel k = compile_kernel(spec, arch, &store);
    SCOPED_TRACE(k.uri + " " + std::string(arch) + "\n" + k.log);
    EXPECT_EQ(k.uri, spec.uri());
    EXPECT_EQ(k.arch, arch);
    EXPECT_TRUE(is_elf(k.cubin));
    EXPECT_EQ(k.stats.cubin_bytes, static_cast<int>(k.cubin.size()));
    EXPECT_GT(k.stats.registers, 0);
    EXPECT_LE(k.stats.registers, 255);
    EXPECT_EQ(k.stats.spill_bytes, 0);
    EXPECT_FALSE(k.stats.from_store);
    EXPECT_EQ(k.key.size(), 64u);
    EXPECT_NE(k.log.find("for '" + std::string(arch) + "'"), std::string::npos);
    keys.push_back(k.key);
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::unique(keys.begin(), keys.end()), keys.end()) << "two arches share a store key";
}

TEST(Jit, SecondRequestIsServedFromTheStoreWithoutNvrtc) {
  TempDir dir("jit");
  DirectoryKernelStore store(dir.path());
  KernelSpec spec = KernelSpec::default_for(Dtype::kFp16, 64, false, 2);
  CompiledKernel first = compile_kernel(spec, "sm_90", &store);
  ASSERT_FALSE(first.stats.from_store);
  const uint64_t compiles = nvrtc_compile_count();
  CompiledKernel second = compile_kernel(spec, "sm_90", &store);
  EXPECT_EQ(nvrtc_compile_count(), compiles) << "the stored kernel was compiled again";
  EXPECT_TRUE(second.stats.from_store);
  EXPECT_EQ(second.cubin, first.cubin);
  EXPECT_EQ(second.key, first.key);
  EXPECT_EQ(second.stats.registers, first.stats.registers);
  EXPECT_EQ(second.stats.spill_bytes, first.stats.spill_bytes);
  EXPECT_EQ(second.stats.stack_bytes, first.stats.stack_bytes);
  EXPECT_EQ(second.stats.shared_bytes, first.stats.shared_bytes);
  EXPECT_EQ(second.log, first.log);

  // Without a store nothing is reused.
  CompiledKernel fresh = compile_kernel(spec, "sm_90", nullptr);
  EXPECT_FALSE(fresh.stats.from_store);
  EXPECT_EQ(nvrtc_compile_count(), compiles + 1);
  EXPECT_EQ(fresh.cubin, first.cubin) << "NVRTC output is expected to be deterministic";
}

TEST(Jit, CorruptStoreEntryIsRecompiledAndRewritten) {
  TempDir dir("jit");
  DirectoryKernelStore store(dir.path());
  KernelSpec spec = KernelSpec::default_for(Dtype::kBf16, 64, true, 4);
  CompiledKernel first = compile_kernel(spec, "sm_80", &store);
  const std::string path = store.entry_path(first.key);
  std::string bytes = slurp(path);
  ASSERT_FALSE(bytes.empty());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);

  const uint64_t compiles = nvrtc_compile_count();
  CompiledKernel again = compile_kernel(spec, "sm_80", &store);
  EXPECT_FALSE(again.stats.from_store);
  EXPECT_EQ(nvrtc_compile_count(), compiles + 1);
  EXPECT_EQ(again.cubin, first.cubin);
  auto rewritten = store.get(first.key);
  ASSERT_TRUE(rewritten.has_value()) << "the damaged entry was not rewritten";
  EXPECT_EQ(rewritten->cubin, first.cubin);
  EXPECT_TRUE(compile_kernel(spec, "sm_80", &store).stats.from_store);
}

TEST(Jit, CompileErrorCarriesUriOptionsLogAndSavedSource) {
  TempDir dir("jit");
  DirectoryKernelStore store(dir.path());
  const std::string name = "ring_fwd_broken_for_test";
  const std::string source = "#include \"cpgen/params.cuh\"\nextern \"C\" __global__ void " + name +
                             "(cpgen::RingFwdParams p) { no_such_function(p); }\n";
  try {
    compile_source(name, source, "sm_90a", &store);
    FAIL() << "a broken source compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCompile);
    const std::string what = e.what();
    EXPECT_NE(what.find(name), std::string::npos) << what;
    EXPECT_NE(what.find("--gpu-architecture=sm_90a"), std::string::npos) << what;
    EXPECT_NE(what.find("-std=c++17"), std::string::npos) << what;
    EXPECT_NE(what.find("no_such_function"), std::string::npos) << "log missing: " << what;
    // One line: the log's first error; the whole log is saved beside the source (a message with
    // the log appended ran to many lines, past what the C ABI and the CLI promise).
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    const std::string marker = "source saved to ";
    size_t at = what.find(marker);
    ASSERT_NE(at, std::string::npos) << what;
    size_t end = what.find(';', at);
    const std::string saved = what.substr(at + marker.size(), end - at - marker.size());
    ASSERT_TRUE(std::filesystem::exists(saved)) << saved;
    EXPECT_EQ(slurp(saved), source);
    // The saved folder is self-contained: the include resolves next to the source.
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(saved).parent_path() / "cpgen/params.cuh"));
    EXPECT_NE(slurp((std::filesystem::path(saved).parent_path() / "nvrtc.log").string()).find("no_such_function"),
              std::string::npos);
    std::filesystem::remove_all(std::filesystem::path(saved).parent_path());
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "a failed compile left a store entry";
}

// A store whose put fails with something else than cpgen's Error: the compile still returns its
// kernel (not stored, saying why), and the next request of the key compiles again. Before, the
// exception left compile_source between the compile and the hand-over to waiting threads, and the
// key stayed in the in-flight table with a broken promise: every later request failed with
// std::future_error.
TEST(Jit, AStoreThatThrowsLeavesTheKeyCompilable) {
  struct ThrowingStore : KernelStore {
    std::optional<CompiledKernel> get(const std::string&) override { return std::nullopt; }
    void put(const CompiledKernel&) override { throw std::runtime_error("disk on fire"); }
    std::string describe() const override { return "throwing"; }
  } store;
  const std::string name = "ring_fwd_store_throws_for_test";
  const std::string source = "extern \"C\" __global__ void " + name + "(int* p) { if (p) *p = 1; }\n";
  for (int attempt = 0; attempt < 2; ++attempt) {
    CompiledKernel k;
    ASSERT_NO_THROW(k = compile_source(name, source, "sm_90", &store)) << "attempt " << attempt;
    EXPECT_FALSE(k.cubin.empty());
    EXPECT_NE(k.not_stored.find("disk on fire"), std::string::npos) << k.not_stored;
  }
}

TEST(Jit, SourceWithoutTheNamedKernelIsACompileError) {
  try {
    compile_source("ring_fwd_expected_name", "extern \"C\" __global__ void other_name() {}\n", "sm_90", nullptr);
    FAIL() << "compiled a program lacking its kernel";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCompile);
    EXPECT_NE(std::string(e.what()).find("no kernel named ring_fwd_expected_name"), std::string::npos) << e.what();
    const std::string what = e.what();
    size_t at = what.find("source saved to ") + 16;
    std::filesystem::remove_all(std::filesystem::path(what.substr(at, what.find(';', at) - at)).parent_path());
  }
}

TEST(Jit, InfeasibleSpecAndBadArchAreRejectedBeforeNvrtc) {
  const uint64_t compiles = nvrtc_compile_count();
  KernelSpec huge = KernelSpec::default_for(Dtype::kBf16, 256, true, 1);
  huge.block_m = 256;
  huge.block_n = 128;
  huge.stages = 4;  // 128 KB of Q plus 512 KB of K/V stages
  try {
    compile_kernel(huge, "sm_90", nullptr);
    FAIL() << "an infeasible spec compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInfeasible);
    EXPECT_NE(std::string(e.what()).find(huge.uri()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shared memory"), std::string::npos) << e.what();
  }
  try {
    compile_kernel(KernelSpec::default_for(Dtype::kBf16, 128, true, 1), "sm_75", nullptr);
    FAIL() << "an unsupported arch compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100, sm_120"), std::string::npos) << e.what();
  }
  EXPECT_EQ(nvrtc_compile_count(), compiles);
}

TEST(Jit, OptionsAndKeyDependOnArchButNotOnFastMath) {
  auto options = compile_options("sm_90a");
  EXPECT_NE(std::find(options.begin(), options.end(), "--gpu-architecture=sm_90a"), options.end());
  EXPECT_NE(std::find(options.begin(), options.end(), "--ptxas-options=--verbose"), options.end());
  EXPECT_EQ(std::find(options.begin(), options.end(), "-use_fast_math"), options.end());
  // NVRTC's own cache (12.9+) would leave a repeated compile's log without resource lines.
  EXPECT_EQ(std::find(options.begin(), options.end(), "--no-cache") != options.end(), nvrtc_has_own_cache());
  const std::string source = render_source(KernelSpec{});
  const std::string name = KernelSpec{}.uri();
  EXPECT_EQ(kernel_store_key(name, source, "sm_90"), kernel_store_key(name, source, "sm_90"));
  EXPECT_NE(kernel_store_key(name, source, "sm_90"), kernel_store_key(name, source, "sm_90a"));
  EXPECT_NE(kernel_store_key(name, source, "sm_90"), kernel_store_key(name, source + " ", "sm_90"));
  EXPECT_NE(kernel_store_key(name, source, "sm_90"), kernel_store_key(name + "x", source, "sm_90"));
  EXPECT_EQ(nvrtc_version_tag().rfind(nvrtc_version(), 0), 0u);
}

TEST(Jit, RingFwdParamsHasTheHostLayoutUnderNvrtc) {
  // The host passes RingFwdParams by value, so NVRTC must lay it out exactly as g++ does; the
  // fixed-width types come from the JIT's prelude there and from <cstdint> here. NVRTC has no
  // offsetof; equal field sizes, total size and alignment fix the same standard layout.
  const std::string source =
      "#include \"cpgen/params.cuh\"\n"
      "static_assert(sizeof(cpgen::RingFwdParams) == " + std::to_string(sizeof(RingFwdParams)) + ", \"size\");\n"
      "static_assert(alignof(cpgen::RingFwdParams) == " + std::to_string(alignof(RingFwdParams)) + ", \"align\");\n"
      "static_assert(sizeof(int64_t) == 8 && sizeof(uint32_t) == 4 && sizeof(int16_t) == 2 && sizeof(void*) == 8 && sizeof(float) == 4, \"widths\");\n"
      "extern \"C\" __global__ void cpgen_layout_probe(cpgen::RingFwdParams p) { if (p.lse) *p.lse = 0.f; }\n";
  CompiledKernel k = compile_source("cpgen_layout_probe", source, "sm_90", nullptr);
  EXPECT_TRUE(is_elf(k.cubin));
}

TEST(Jit, ConcurrentCompilesFromThreadsAgreeWithSerialOnes) {
  // The tuner compiles in a thread pool: NVRTC programs compiled at once must come out as they do
  // alone, and threads racing on one key must all get a valid kernel.
  TempDir dir("jit");
  DirectoryKernelStore store(dir.path());
  std::vector<KernelSpec> specs = {KernelSpec::default_for(Dtype::kBf16, 64, true, 1),
                                   KernelSpec::default_for(Dtype::kFp16, 64, false, 8),
                                   KernelSpec::default_for(Dtype::kBf16, 64, true, 1)};
  std::vector<CompiledKernel> results(specs.size());
  std::vector<std::string> errors(specs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < specs.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        results[i] = compile_kernel(specs[i], "sm_90", &store);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < specs.size(); ++i) ASSERT_EQ(errors[i], "") << specs[i].uri();
  for (size_t i = 0; i < 2; ++i) {  // the third repeats the first
    CompiledKernel serial = compile_kernel(specs[i], "sm_90", nullptr);
    EXPECT_EQ(results[i].cubin, serial.cubin) << specs[i].uri();
    EXPECT_EQ(results[i].stats.registers, serial.stats.registers) << specs[i].uri();
  }
  EXPECT_EQ(results[0].cubin, results[2].cubin);
}

TEST(Jit, ThreadsAskingForOneKernelShareOneCompile) {
  // N virtual ranks in one process request the same kernel at once: one NVRTC compile serves all.
  TempDir dir("jit");
  DirectoryKernelStore store(dir.path());
  const KernelSpec spec = KernelSpec::default_for(Dtype::kFp16, 96, true, 2);
  const uint64_t compiles = nvrtc_compile_count();
  std::vector<CompiledKernel> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) threads.emplace_back([&] { result = compile_kernel(spec, "sm_80", &store); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(nvrtc_compile_count(), compiles + 1);
  for (const CompiledKernel& k : results) {
    EXPECT_EQ(k.uri, spec.uri());
    EXPECT_EQ(k.cubin, results[0].cubin);
    EXPECT_TRUE(is_elf(k.cubin));
  }
}

TEST(Jit, ThreadsWaitingOnAFailedCompileAllGetItsError) {
  const std::string name = "ring_fwd_shared_failure";
  const std::string source = "extern \"C\" __global__ void " + name + "() { missing_symbol(); }\n";
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (auto& error : errors) {
    threads.emplace_back([&] {
      try {
        compile_source(name, source, "sm_90", nullptr);
      } catch (const Error& e) {
        error = e.kind() == ErrorKind::kCompile ? e.what() : "wrong kind";
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const std::string& error : errors) EXPECT_NE(error.find("missing_symbol"), std::string::npos) << error;
  std::filesystem::remove_all(std::filesystem::path(failed_compile_dir()) /
                              (name + "-" + kernel_store_key(name, source, "sm_90").substr(0, 12)));
}

}  // namespace
}  // namespace cpgen
