#include "cache/sqlite_kernel_store.h"

#include <nlohmann/json.hpp>

#include "cache/kernel_blobs.h"
#include "cache/records.h"
#include "runtime/core/content_checksum.h"
#include "runtime/jit/jit.h"

namespace cpgen {
namespace {

// A row's checksum: its stats JSON as written (the checksum field left out) and its cubin.
uint64_t row_checksum(nlohmann::json stats, std::string_view cubin) {
  stats.erase("checksum");
  return content_checksum(cubin, content_checksum(stats.dump()));
}

}  // namespace

SqliteKernelStore::SqliteKernelStore(const std::string& db_path) : db_(std::make_unique<Database>(db_path)) {}

std::optional<CompiledKernel> SqliteKernelStore::get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<KernelBlob> blob = get_kernel_blob(*db_, key);
  if (!blob) return std::nullopt;
  CompiledKernel k;
  k.key = blob->key;
  k.uri = blob->uri;
  k.arch = blob->arch;
  k.cubin = std::move(blob->cubin);
  try {
    nlohmann::json s = nlohmann::json::parse(blob->stats);
    // The row's stats and cubin against the checksum put() wrote (SQLite's integrity check does
    // not look inside a blob): a damaged row reads as absent.
    if (!s.contains("checksum") || s.at("checksum").get<uint64_t>() != row_checksum(s, k.cubin)) return std::nullopt;
    k.stats.registers = s.at("registers").get<int>();
    k.stats.spill_bytes = s.at("spill_bytes").get<int>();
    k.stats.stack_bytes = s.at("stack_bytes").get<int>();
    k.stats.shared_bytes = s.at("shared_bytes").get<int>();
    k.stats.compile_ms = s.at("compile_ms").get<double>();
    k.log = s.value("log", "");
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // a damaged row reads as absent; the caller recompiles and replaces it
  }
  k.stats.cubin_bytes = static_cast<int>(k.cubin.size());
  k.stats.from_store = true;
  return k;
}

void SqliteKernelStore::put(const CompiledKernel& kernel) {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json stats = {{"registers", kernel.stats.registers},   {"spill_bytes", kernel.stats.spill_bytes},
                          {"stack_bytes", kernel.stats.stack_bytes}, {"shared_bytes", kernel.stats.shared_bytes},
                          {"compile_ms", kernel.stats.compile_ms},   {"log", kernel.log}};
  stats["checksum"] = row_checksum(stats, kernel.cubin);
  // The key hashes the NVRTC version among other things; the column keeps it readable.
  put_kernel_blob(*db_, {kernel.key, kernel.uri, kernel.arch, nvrtc_version(), kernel.cubin, stats.dump(), now_unix_seconds()});
}

std::string SqliteKernelStore::describe() const { return "database " + db_->path(); }

}  // namespace cpgen
