#include "cache/kernel_blobs.h"

namespace cpgen {

std::optional<KernelBlob> get_kernel_blob(Database& db, const std::string& key) {
  Statement select = db.prepare("SELECT key, uri, arch, nvrtc_version, cubin, stats, created_at FROM kernels WHERE key = ?");
  select.bind(1, key);
  if (!select.step()) return std::nullopt;
  return KernelBlob{select.column_text(0), select.column_text(1), select.column_text(2), select.column_text(3),
                    select.column_blob(4), select.column_text(5), select.column_int(6)};
}

void put_kernel_blob(Database& db, const KernelBlob& blob) {
  db.transaction([&] {
    Statement insert = db.prepare(
        "INSERT INTO kernels (key, uri, arch, nvrtc_version, cubin, stats, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET uri = excluded.uri, arch = excluded.arch, nvrtc_version = excluded.nvrtc_version, "
        "cubin = excluded.cubin, stats = excluded.stats, created_at = excluded.created_at");
    insert.bind(1, blob.key).bind(2, blob.uri).bind(3, blob.arch).bind(4, blob.nvrtc_version);
    insert.bind_blob(5, blob.cubin).bind(6, blob.stats).bind(7, blob.created_at);
    insert.run();
  });
}

}  // namespace cpgen
