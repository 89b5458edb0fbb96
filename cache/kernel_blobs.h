// The `kernels` table: compiled cubins keyed by a hash of (generated source, options, NVRTC
// version, arch), the same key the JIT's kernel store uses, so a database can carry its
// compiled kernels along with its records.
#pragma once

#include <optional>
#include <string>

#include "cache/database.h"

namespace cpgen {

struct KernelBlob {
  std::string key;
  std::string uri;
  std::string arch;
  std::string nvrtc_version;
  std::string cubin;   // bytes
  std::string stats;   // JSON of the compile statistics
  int64_t created_at = 0;
};

std::optional<KernelBlob> get_kernel_blob(Database& db, const std::string& key);
// Stores the blob in its own transaction, replacing a row of the same key (KernelStore::put
// semantics: a damaged row is overwritten by the recompiled kernel).
void put_kernel_blob(Database& db, const KernelBlob& blob);

}  // namespace cpgen
