// The emulated backend's compiler (runtime/jit/host_jit.h): finding the host compiler, the store
// key, and a real compile through the store. Needs a host C++ compiler, no GPU.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "cpgen/error.h"
#include "runtime/jit/host_jit.h"
#include "runtime/jit/kernel_store.h"
#include "temp_dir.h"

namespace cpgen {
namespace {

using testing::TempDir;

std::string missing_compiler_error(const char* cxx, const std::string& path) {
  try {
    find_host_compiler(cxx, path);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCompile);
    return e.what();
  }
  return "";
}

void make_executable(const std::string& path) {
  std::ofstream(path) << "#!/bin/sh\n";
  ::chmod(path.c_str(), 0755);
}

TEST(HostJit, NoCompilerIsOneErrorNamingThePackage) {
  TempDir empty("nocxx");
  const std::string none = missing_compiler_error(nullptr, empty.path());
  EXPECT_NE(none.find("found none"), std::string::npos) << none;
  EXPECT_NE(none.find("apt-get install g++"), std::string::npos) << none;
  EXPECT_EQ(none.find('\n'), std::string::npos) << none;
  const std::string bad_cxx = missing_compiler_error("no-such-compiler-cpgen", empty.path());
  EXPECT_NE(bad_cxx.find("CXX=no-such-compiler-cpgen"), std::string::npos) << bad_cxx;
  EXPECT_NE(bad_cxx.find("apt-get install g++"), std::string::npos) << bad_cxx;
}

TEST(HostJit, FindsCxxFirstThenTheUsualNamesOnPath) {
  TempDir a("cxx_a"), b("cxx_b");
  make_executable(a.path() + "/clang++");
  make_executable(b.path() + "/g++");
  make_executable(b.path() + "/my-cxx");
  const std::string path = a.path() + ":" + b.path();
  // c++ is on neither folder; g++ comes before clang++ in the order of names, whatever the folder.
  EXPECT_EQ(find_host_compiler(nullptr, path), b.path() + "/g++");
  EXPECT_EQ(find_host_compiler("", path), b.path() + "/g++");
  EXPECT_EQ(find_host_compiler("my-cxx", path), b.path() + "/my-cxx");
  EXPECT_EQ(find_host_compiler((a.path() + "/clang++").c_str(), ""), a.path() + "/clang++");
  // A file that is not executable is not a compiler.
  std::ofstream(a.path() + "/c++") << "";
  EXPECT_EQ(find_host_compiler(nullptr, path), b.path() + "/g++");
}

TEST(HostJit, StoreKeyChangesWithSourceAndCompiler) {
  const KernelSpec spec = KernelSpec::default_for(Dtype::kBf16, 64, true, 1);
  const std::string source = emulated_source(spec);
  HostCompiler gcc{"/usr/bin/g++", "/usr/bin/g++ | g++ 12"}, gcc13{"/usr/bin/g++", "/usr/bin/g++ | g++ 13"};
  EXPECT_EQ(emulated_store_key(source, gcc), emulated_store_key(source, gcc));
  EXPECT_NE(emulated_store_key(source, gcc), emulated_store_key(source, gcc13));
  EXPECT_NE(emulated_store_key(source, gcc), emulated_store_key(source + " ", gcc));
  // The source holds the emulator's run time and names its kernel, so the object is whole.
  EXPECT_NE(source.find(spec.uri() + "(params)"), std::string::npos);
  EXPECT_NE(source.find("cpgen_emulated_launch"), std::string::npos);
  EXPECT_EQ(source.find("cuda_emulation.cpp"), std::string::npos);  // linked as an object instead
  EXPECT_NE(emulator_runtime_source().find("#include \"cpgen/emulation/cuda_emulation.cpp\""), std::string::npos);
}

TEST(HostJit, CompilesOnceThenReadsTheStore) {
  TempDir dir("host_jit");
  DirectoryKernelStore store(dir.path());
  const KernelSpec spec = KernelSpec::default_for(Dtype::kFp16, 64, false, 1);
  const int before = host_compile_count();
  const CompiledKernel first = compile_emulated(spec, &store);
  EXPECT_EQ(host_compile_count(), before + 1);
  EXPECT_EQ(first.uri, spec.uri());
  EXPECT_EQ(first.arch, kEmulatedArch);
  ASSERT_GT(first.cubin.size(), 4u);
  EXPECT_EQ(first.cubin.compare(0, 4, "\x7f" "ELF"), 0);
  EXPECT_FALSE(first.stats.from_store);
  const CompiledKernel again = compile_emulated(spec, &store);
  EXPECT_EQ(host_compile_count(), before + 1);
  EXPECT_TRUE(again.stats.from_store);
  EXPECT_EQ(again.cubin, first.cubin);
  EXPECT_EQ(again.key, first.key);
}

// The emulator's run time is compiled at most once per process and compiler, then read from the
// store by other processes: two kernels compiled into a fresh store cost at most one run-time
// compile between them (the emulated ring tests load and run what these compiles produce).
TEST(HostJit, TheEmulatorRunTimeIsCompiledOnceAndShared) {
  TempDir dir("host_jit_runtime");
  DirectoryKernelStore store(dir.path());
  const int before = emulator_runtime_compile_count();
  const CompiledKernel a = compile_emulated(KernelSpec::backward_pre(Dtype::kBf16, 64), &store);
  const CompiledKernel b = compile_emulated(KernelSpec::backward_convert(Dtype::kBf16, 64), &store);
  EXPECT_LE(emulator_runtime_compile_count() - before, 1);
  EXPECT_EQ(a.cubin.compare(0, 4, "\x7f" "ELF"), 0);
  EXPECT_EQ(b.cubin.compare(0, 4, "\x7f" "ELF"), 0);
}

// A compiler that fails: one error with its exit status and log, and the folder with the source
// kept for the user; nothing stored.
TEST(HostJit, AFailedCompileKeepsTheSourceAndShowsTheLog) {
  TempDir bin("fake_cxx"), store_dir("host_jit_fail");
  const std::string fake = bin.path() + "/c++";
  std::ofstream(fake) << "#!/bin/sh\necho 'kernel.cpp:1: error: broken on purpose' >&2\nexit 3\n";
  ::chmod(fake.c_str(), 0755);
  DirectoryKernelStore store(store_dir.path());
  const KernelSpec spec = KernelSpec::default_for(Dtype::kBf16, 64, true, 1);
  std::string message;
  try {
    compile_emulated(spec, &store, HostCompiler{fake, fake + " | fake"});
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCompile);
    message = e.what();
  }
  EXPECT_NE(message.find("emulated kernel " + spec.uri()), std::string::npos) << message;
  EXPECT_NE(message.find("exit status 3"), std::string::npos) << message;
  EXPECT_NE(message.find("broken on purpose"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line; the log stays in the kept folder: " << message;
  // The folder an error names after "source kept in ", up to the next ';'.
  auto kept_folder = [](const std::string& text) {
    const auto at = text.find("source kept in ");
    return at == std::string::npos ? std::string() : text.substr(at + 15, text.find(';', at) - at - 15);
  };
  const std::string kept = kept_folder(message);
  ASSERT_FALSE(kept.empty()) << message;
  // Under this user's own folder: a shared /tmp/cpgen/emulated made by another user refused it.
  EXPECT_NE(kept.find("/cpgen-" + std::to_string(::getuid()) + "/emulated/"), std::string::npos) << kept;
  EXPECT_TRUE(std::filesystem::exists(kept + "/kernel.cpp")) << kept;
  EXPECT_TRUE(std::filesystem::exists(kept + "/include/cpgen/emulation/cuda_emulation.h")) << kept;
  std::filesystem::remove_all(kept);
  EXPECT_TRUE(std::filesystem::is_empty(store_dir.path()));
  // One that succeeds without writing the object is an error too, not an empty kernel; its folder
  // is kept and named the same way.
  std::ofstream(fake) << "#!/bin/sh\nexit 0\n";
  message.clear();
  try {
    compile_emulated(spec, &store, HostCompiler{fake, fake + " | silent"});
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCompile);
    message = e.what();
  }
  EXPECT_NE(message.find("exit status 0 but no runtime.o written"), std::string::npos) << message;
  const std::string silent_kept = kept_folder(message);
  ASSERT_FALSE(silent_kept.empty()) << message;
  EXPECT_TRUE(std::filesystem::exists(silent_kept + "/runtime.cpp")) << silent_kept;
  std::filesystem::remove_all(silent_kept);
  EXPECT_TRUE(std::filesystem::is_empty(store_dir.path()));
}

// A store that cannot keep anything (read-only, full).
class RefusingStore : public KernelStore {
 public:
  std::optional<CompiledKernel> get(const std::string&) override { return std::nullopt; }
  void put(const CompiledKernel&) override { throw Error(ErrorKind::kIo, "cannot write: the store is full"); }
  std::string describe() const override { return "a full store"; }
};

// A store that cannot keep the compiled object does not fail the compile (the object is good; the
// NVRTC path already behaved so): not_stored says why. The whole emulated run failed before.
TEST(HostJit, AStoreThatCannotKeepTheObjectDoesNotFailTheCompile) {
  TempDir bin("fake_cxx_ok");
  const std::string fake = bin.path() + "/c++";
  // Writes a stand-in object to the path after -o.
  std::ofstream(fake) << "#!/bin/sh\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then printf 'object' > \"$2\"; fi; shift; done\n";
  ::chmod(fake.c_str(), 0755);
  RefusingStore store;
  const KernelSpec spec = KernelSpec::default_for(Dtype::kFp16, 64, true, 1);
  const CompiledKernel k = compile_emulated(spec, &store, HostCompiler{fake, fake + " | writes"});
  EXPECT_EQ(k.cubin, "object");
  EXPECT_NE(k.not_stored.find("the store is full"), std::string::npos) << k.not_stored;
}

}  // namespace
}  // namespace cpgen
