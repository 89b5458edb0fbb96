// Shipped pretuned caches: JSON files in the exchange format (cache/exchange.h), installed with
// the library under <datadir>/cpgen/caches and searched in this order:
//   1. the folders in $CPGEN_CACHES_DIR (colon separated),
//   2. an installed library: <prefix>/share/cpgen/caches, found from where libcpgen was loaded
//      (runtime/core/library_location.h), so a moved prefix still finds its caches;
//      the library in its build tree: the source tree's caches/ instead (no install needed).
// A file that cannot be read or parsed is skipped with a warning; it never stops selection.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "cache/records.h"

namespace cpgen {

struct CacheEntry {
  std::string file;
  std::string kernel_uri;
  nlohmann::json workload;        // a full WorkloadKey, or a pattern naming some fields
  std::optional<Record> record;   // set for measured entries (full workload and environment)
  bool winner = false;
  int dir_index = 0;              // of its folder in the search order: a lower one takes precedence
};

struct SearchedDir {
  std::string path;
  bool exists = false;
};

struct PretunedCaches {
  std::vector<SearchedDir> dirs;  // every folder looked at, in search order
  std::vector<std::string> files;
  std::vector<CacheEntry> entries;
};

std::vector<std::string> default_cache_dirs();
PretunedCaches load_pretuned_caches(const std::vector<std::string>& dirs);
// Loads default_cache_dirs() once per process.
const PretunedCaches& shipped_caches();

// True when every field the pattern names agrees with w (gqa_group is derived from the heads).
bool pattern_matches(const nlohmann::json& pattern, const WorkloadKey& w);
// The same with w.to_json() made once by the caller: a lookup tries every pattern entry, and
// building the workload's JSON for each was most of `cpgen explain`'s time on large files.
bool pattern_matches(const nlohmann::json& pattern, const WorkloadKey& w, const nlohmann::json& w_json);

}  // namespace cpgen
