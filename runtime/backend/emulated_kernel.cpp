#include "runtime/backend/emulated_kernel.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "cpgen/error.h"
#include "runtime/backend/emulated_fault.h"
#include "runtime/core/user_cache_dir.h"

namespace cpgen {
namespace {

std::atomic<int> g_approximation{CPGEN_APPROX_CORRECTLY_ROUNDED};

}  // namespace

void set_emulated_approximation(EmulatedApproximation mode) { g_approximation = static_cast<int>(mode); }

const char* approximation_name(EmulatedApproximation mode) {
  switch (mode) {
    case EmulatedApproximation::kCorrectlyRounded: return "exact";
    case EmulatedApproximation::kHigh: return "high";
    case EmulatedApproximation::kLow: return "low";
    case EmulatedApproximation::kMixed: return "mixed";
  }
  return "unknown";
}

EmulatedKernel::EmulatedKernel(const CompiledKernel& compiled) : uri_(compiled.uri) {
  // dlopen needs a file. Each load gets its own (two copies of one object loaded from one path
  // would be the same handle), removed as soon as it is mapped.
  std::string path = (std::filesystem::path(temp_dir()) / "cpgen-emulated-XXXXXX.so").string();
  const int fd = ::mkstemps(path.data(), 3);
  if (fd < 0) throw Error(ErrorKind::kIo, "emulated kernel " + uri_ + ": cannot create " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < compiled.cubin.size()) {
    const ssize_t n = ::write(fd, compiled.cubin.data() + done, compiled.cubin.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (done != compiled.cubin.size()) {
    ::unlink(path.c_str());
    throw Error(ErrorKind::kIo, "emulated kernel " + uri_ + ": cannot write " + path);
  }
  handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  const char* load_error = handle_ ? nullptr : ::dlerror();
  ::unlink(path.c_str());
  if (!handle_)
    throw Error(ErrorKind::kCompile, "emulated kernel " + uri_ + ": cannot load its shared object: " +
                                         (load_error ? load_error : "unknown dlopen error"));
  entry_ = reinterpret_cast<CpgenEmulatedEntry>(::dlsym(handle_, CPGEN_EMULATED_ENTRY));
  recover_ = reinterpret_cast<CpgenEmulatedFault>(::dlsym(handle_, CPGEN_EMULATED_FAULT_ENTRY));
  if (!entry_ || !recover_) {
    ::dlclose(handle_);
    handle_ = nullptr;
    throw Error(ErrorKind::kCompile, "emulated kernel " + uri_ + ": its shared object has no " +
                                         (entry_ ? CPGEN_EMULATED_FAULT_ENTRY : CPGEN_EMULATED_ENTRY) +
                                         " entry point");
  }
}

EmulatedKernel::~EmulatedKernel() {
  if (handle_) ::dlclose(handle_);
}

void EmulatedKernel::launch(EmulatedGrid grid, int threads, int shared_bytes, const void* params,
                            const std::vector<CpgenEmulatedBuffer>& buffers) const {
  CpgenEmulatedLaunch launch{};
  launch.abi_version = CPGEN_EMULATED_ABI;
  launch.grid_x = grid.x;
  launch.grid_y = grid.y;
  launch.grid_z = grid.z;
  launch.threads = static_cast<unsigned>(threads);
  launch.shared_bytes = shared_bytes;
  launch.params = params;
  launch.buffers = buffers.data();
  launch.buffer_count = static_cast<int>(buffers.size());
  launch.approximation = g_approximation.load();
  int status = 0;
  {
    // A plain access that hits a guard page of the emulated device's buffers fails this launch
    // (the object's emulator reports it) instead of killing the process.
    EmulatedFaultTrap trap(recover_);
    status = entry_(&launch);
  }
  if (status != 0) {
    launch.error[sizeof launch.error - 1] = '\0';
    throw Error(ErrorKind::kInternal, "emulated launch of " + uri_ + " (grid " + std::to_string(grid.x) + "x" +
                                          std::to_string(grid.y) + "x" + std::to_string(grid.z) + ", " +
                                          std::to_string(threads) + " threads): " + launch.error);
  }
}

}  // namespace cpgen
