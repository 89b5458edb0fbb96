// A KernelStore over the tuning database's `kernels` table, so one file can carry records and
// the cubins they name (e.g. to copy a tuned setup to another node of the same kind). The
// directory store (runtime/jit/kernel_store.h) stays the default; this one is chosen explicitly.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "cache/database.h"
#include "runtime/jit/kernel_store.h"

namespace cpgen {

class SqliteKernelStore : public KernelStore {
 public:
  // Opens its own connection to the database at `db_path` (creating it as Database does).
  explicit SqliteKernelStore(const std::string& db_path);
  std::optional<CompiledKernel> get(const std::string& key) override;
  void put(const CompiledKernel& kernel) override;
  std::string describe() const override;

 private:
  // One connection shared by the compile threads: a transaction must not interleave with
  // another thread's statements on the same connection.
  std::mutex mutex_;
  std::unique_ptr<Database> db_;
};

}  // namespace cpgen
