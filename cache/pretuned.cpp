#include "cache/pretuned.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "cache/exchange.h"
#include "cpgen/error.h"
#include "runtime/core/library_location.h"
#include "runtime/core/json_text.h"
#include "runtime/core/text_file.h"

namespace cpgen {
namespace fs = std::filesystem;

std::vector<std::string> default_cache_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("CPGEN_CACHES_DIR")) {
    std::stringstream list(env);
    std::string dir;
    while (std::getline(list, dir, ':')) {
      if (!dir.empty()) dirs.push_back(dir);
    }
  }
  if (running_from_build_tree()) {
    dirs.push_back(CPGEN_CACHES_SOURCE_DIR);
  } else if (const std::string lib = library_path(); !lib.empty()) {
    // <prefix>/lib/libcpgen.so -> <prefix>/share/cpgen/caches, the relative path from the
    // install's library folder to its data folder (CMakeLists.txt works it out).
    dirs.push_back((fs::path(lib).parent_path() / CPGEN_CACHES_FROM_LIBRARY_DIR).lexically_normal().string());
  }
  return dirs;
}

namespace {

// A pattern names workload fields (WorkloadKey's JSON, its mask fields, and gqa_group, derived from
// the heads), each with a value of the field's JSON type. pattern_matches compares an unknown name
// or a value of another type as a mismatch, so such an entry matched nothing, silently; it is
// refused instead, and with it the file, as any malformed entry is.
// The fields a pattern may name, each with a value of its type: made once, not per entry.
const nlohmann::json& pattern_fields() {
  static const nlohmann::json fields = [] {
    WorkloadKey model;
    model.mask.window_left = 0;  // so that to_json lists the mask fields
    nlohmann::json j = model.to_json();
    j["gqa_group"] = 1;
    return j;
  }();
  return fields;
}

void check_pattern(const nlohmann::json& pattern, const std::string& at) {
  const nlohmann::json& known = pattern_fields();
  for (const auto& [name, value] : pattern.items()) {
    if (!known.contains(name)) {
      throw_bad_input(at + ": workload field '" + printable(name, 80) + "' is not a workload field; known: " +
                      field_names(known));
    }
    // An integer field takes an integer (pattern_matches compares gqa_group as one: 1.0 matched
    // nothing), a string or boolean one its own type.
    const nlohmann::json& like = known[name];
    const bool same_type = like.is_number() ? value.is_number_integer() : value.type() == like.type();
    if (!same_type)
      throw_bad_input(at + ": workload field '" + printable(name, 80) + "' must be " +
                      (like.is_number() ? "an integer" : like.is_boolean() ? "true or false" : "a string") + "; got " +
                      (value.is_string() ? in_quotes(value.get_ref<const std::string&>(), 80) : printable(value.dump(), 80)));
  }
}

}  // namespace

PretunedCaches load_pretuned_caches(const std::vector<std::string>& dirs) {
  PretunedCaches caches;
  std::set<std::string> seen_names;  // an installed copy and the source copy are the same cache
  for (const std::string& dir : dirs) {
    std::error_code ec;
    caches.dirs.push_back({dir, fs::is_directory(dir, ec)});
    if (!caches.dirs.back().exists) continue;
    std::vector<fs::path> files;
    for (const auto& item : fs::directory_iterator(dir, ec)) {
      if (item.path().extension() == ".json") files.push_back(item.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      // A name loaded from an earlier folder is that cache's copy; one skipped there (unreadable,
      // malformed) does not hide this one.
      if (seen_names.contains(file.filename().string())) continue;
      try {
        // Every reason below starts with the file's path. Only a regular file (a link to one too)
        // is read, judged on the opened file: a FIFO in the folder hung every kernel selection in
        // its open, and a device would be read past its end.
        const nlohmann::json doc = read_json_file(file.string(), file.string(), "a cache", kMaxJsonFileBytes,
                                                  kMaxJsonDepth, FileKinds::kRegularOnly);
        check_cache_header(doc, file.string());
        const auto& entries = doc.at("entries");
        std::vector<CacheEntry> parsed;
        for (size_t i = 0; i < entries.size(); ++i) {
          const auto& e = entries[i];
          const std::string at = file.string() + " entry " + std::to_string(i);
          if (!e.is_object() || !e.contains("workload") || !e["workload"].is_object() || !e.contains("kernel") ||
              !e["kernel"].is_string()) {
            throw_bad_input(at + ": needs an object 'workload' and a string 'kernel'");
          }
          CacheEntry entry;
          entry.file = file.string();
          entry.kernel_uri = e["kernel"].get<std::string>();
          entry.workload = e["workload"];
          entry.winner = entry_winner(e, at);
          entry.dir_index = static_cast<int>(caches.dirs.size()) - 1;
          if (is_heuristic_entry(e, at)) {
            check_entry_fields(e, at);
            check_pattern(entry.workload, at);
          } else {
            entry.record = record_from_json(e, at);
            check_winner(*entry.record, entry.winner, at);
          }
          parsed.push_back(std::move(entry));
        }
        seen_names.insert(file.filename().string());
        caches.files.push_back(file.string());
        for (auto& entry : parsed) caches.entries.push_back(std::move(entry));
      } catch (const std::exception& e) {
        warn("pretuned cache skipped: " + std::string(e.what()));  // one line: warn() sees to it
      }
    }
  }
  return caches;
}

const PretunedCaches& shipped_caches() {
  static const PretunedCaches caches = load_pretuned_caches(default_cache_dirs());
  return caches;
}

bool pattern_matches(const nlohmann::json& pattern, const WorkloadKey& w) {
  return pattern_matches(pattern, w, w.to_json());
}

bool pattern_matches(const nlohmann::json& pattern, const WorkloadKey& w, const nlohmann::json& full) {
  // The fields shipped patterns name are compared on the key itself (explain --shapes matches
  // every workload of every shape against every pattern); any other field through its JSON form.
  for (const auto& [name, value] : pattern.items()) {
    if (name == "gqa_group") {
      // Compared as JSON numbers: get<int>() wrapped 4294967297 to 1, which matched GQA 1.
      if (!value.is_number_integer() || value != nlohmann::json(w.gqa_group())) return false;
    } else if (name == "dtype") {
      if (!value.is_string() || value.get_ref<const std::string&>() != dtype_name(w.dtype)) return false;
    } else if (name == "head_dim") {
      if (!value.is_number() || value != nlohmann::json(w.head_dim)) return false;
    } else if (name == "causal") {
      if (!value.is_boolean() || value.get<bool>() != w.causal) return false;
    } else if (!full.contains(name) || full[name] != value) {
      return false;
    }
  }
  return true;
}

}  // namespace cpgen
