// The compiled-kernel store: cubins and their compile stats by key, so that a kernel is compiled
// once per (source, templates, options, NVRTC version, arch) and later requests only read it.
// The interface is small so that another backing (e.g. the SQLite tuning database) can implement
// it; every implementation must be safe to use from several threads and several processes.
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include "runtime/jit/compiled_kernel.h"

namespace cpgen {

class KernelStore {
 public:
  virtual ~KernelStore() = default;
  // The kernel stored under `key`, or nullopt when absent or unreadable (a damaged entry reads
  // as absent, so the caller recompiles and put() replaces it). stats.from_store is set.
  virtual std::optional<CompiledKernel> get(const std::string& key) = 0;
  // Stores `kernel` under kernel.key, replacing any entry; a concurrent get() sees either the old
  // entry, the new one, or none, never a partial one. Throws Error(kIo) when it cannot write.
  virtual void put(const CompiledKernel& kernel) = 0;
  // Where the store lives, for messages ("directory /home/u/.cache/cpgen/kernels").
  virtual std::string describe() const = 0;
};

// Puts `kernel` in `store` (null: nothing). A kernel the store cannot keep (read-only, full, any
// failure of put) is still good and only costs a compile next time: not_stored says why, and the
// kernel's log ends with it. The NVRTC and the emulated compiles both keep their kernels so.
void keep_in_store(KernelStore* store, CompiledKernel& kernel);

// One file per kernel, <dir>/<key>.cpgenk, written to a unique temporary name in the same
// directory and then rename()d over the final name, which POSIX makes atomic. The first put of a
// process removes temporary names older than an hour (writers that died before their rename).
class DirectoryKernelStore : public KernelStore {
 public:
  explicit DirectoryKernelStore(std::string dir);
  std::optional<CompiledKernel> get(const std::string& key) override;
  void put(const CompiledKernel& kernel) override;
  std::string describe() const override;

  const std::string& dir() const { return dir_; }
  std::string entry_path(const std::string& key) const;

 private:
  void remove_stale_temps();
  std::string dir_;
  std::once_flag swept_;
};

// $CPGEN_KERNEL_DIR, else $XDG_CACHE_HOME/cpgen/kernels, else $HOME/.cache/cpgen/kernels, else
// $TMPDIR/cpgen-<uid>/kernels (the environment is read on each call).
std::string default_kernel_dir();
// A process-wide DirectoryKernelStore on default_kernel_dir(), created on first use.
KernelStore* default_kernel_store();

}  // namespace cpgen
