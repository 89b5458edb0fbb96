// The exchange format for tuning results: a versioned, diffable JSON document. `cpgen db export`
// writes it, `cpgen db import` reads it, and shipped pretuned caches (caches/*.json) use it.
//
//   {"format": "cpgen-tuning-cache", "version": 1, "entries": [
//     {"workload": {...WorkloadKey...}, "kernel": "ring_fwd_...", "disposition": "ok",
//      "median_ms": 0.41, "spread_ms": 0.01, "samples_ms": [...], "tflops": 512.3,
//      "registers": 168, "spill_bytes": 0, "environment": {...}, "source": "measured",
//      "detail": "", "created_at": 1763700000, "winner": true}, ...]}
//
// Entries are sorted (workload, kernel, environment) and written one field per line, so two
// exports diff line by line. Pretuned caches may also hold pattern entries ("source":
// "default-heuristic"): their "workload" names only some fields (e.g. dtype, head_dim, causal,
// gqa_group), they carry no timing and no environment, and they match any workload agreeing on
// the fields they name. Pattern entries live only in cache files, never in a database.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "cache/database.h"
#include "cache/records.h"

namespace cpgen {

inline constexpr const char* kCacheFormatName = "cpgen-tuning-cache";
inline constexpr int kCacheFormatVersion = 1;

nlohmann::json record_to_json(const Record& r, bool winner);
// Reads and validates one entry (validate_record); throws kBadInput naming `where` and the field,
// also for a field of the entry, its workload or its environment that record_to_json never writes.
Record record_from_json(const nlohmann::json& entry, const std::string& where);
// The entry-level part of that check (the entry's and its environment's fields), for entries whose
// workload is a pattern (the shipped defaults), which check_pattern judges.
void check_entry_fields(const nlohmann::json& entry, const std::string& where);
// A "winner": true only on a timed 'ok' entry (kBadInput naming `where` otherwise).
void check_winner(const Record& r, bool winner, const std::string& where);
// An object's field names, "a, b, c": the fields a message says are allowed.
std::string field_names(const nlohmann::json& object);
// What an imported record must satisfy before it may be stored: a workload the kernels support
// (head dim, GQA group, arch, positive lengths), a kernel built for that workload (dtype, head
// dim, mask, group) and feasible on its arch unless the record says it is infeasible, finite
// positive times and samples, and samples present for an "ok" record. Throws kBadInput.
void validate_record(const Record& r, const std::string& where);

// leave_out_invalid (db export): a record import would refuse is left out with a warning, so the
// file imports again; otherwise (db merge's source) every record is exported and import judges.
nlohmann::json export_cache(Database& db, bool leave_out_invalid = false);
// The document as written to a file: two-space indentation and a final newline.
std::string cache_text(const nlohmann::json& doc);
// Checks "format" and "version"; throws kBadInput naming the file and what is expected.
void check_cache_header(const nlohmann::json& doc, const std::string& where);

// An entry's optional fields, refused (kBadInput, `at` first) when of the wrong type: whether its
// "source" is "default-heuristic" (a pattern the defaults ship, never timed) and its "winner" flag
// (false when absent). The pretuned caches and imports read them alike.
bool is_heuristic_entry(const nlohmann::json& entry, const std::string& at);
bool entry_winner(const nlohmann::json& entry, const std::string& at);

struct ImportStats {
  int added = 0;      // identities new to the database
  int replaced = 0;   // the incoming record was better and replaced the stored one
  int kept = 0;       // the stored record was at least as good
  int skipped = 0;    // pattern entries (defaults), which belong only in cache files
  int winners = 0;    // pinned winners taken from the incoming side
};

// The entries of a document, every one validated; nothing is written. A bad entry throws
// kBadInput naming `where`, the entry index and the field, so a caller may read everything
// before it opens (or creates) the database it will write.
struct CacheEntries {
  std::vector<std::pair<Record, bool>> records;  // the record and its "winner" flag
  int skipped = 0;                               // pattern entries (defaults)
};
CacheEntries read_cache_entries(const nlohmann::json& doc, const std::string& where);
// The entries of another database file, opened read-only (nothing there is created or moved):
// a file that is not SQLite is kBadInput, a damaged one kDatabase.
CacheEntries read_database_entries(const std::string& other_path);
// Stores entries under the keep-the-better rule, all in one transaction.
ImportStats store_cache_entries(Database& db, const CacheEntries& entries);

// Imports a document under the keep-the-better rule, in one transaction.
ImportStats import_cache(Database& db, const nlohmann::json& doc, const std::string& where);
// Merges another database file (read through its own export) under the same rule.
ImportStats merge_database(Database& db, const std::string& other_path);

// The pattern entries for KernelSpec::default_for over every supported combination: the content
// of the shipped caches/default-heuristic.json.
nlohmann::json default_heuristic_cache();

struct VerifyReport {
  std::vector<std::string> integrity;   // PRAGMA integrity_check lines ({"ok"} when sound)
  int schema_version = 0;
  int64_t workloads = 0;
  int64_t records = 0;
  int64_t other_environment = 0;        // records not made in the current environment
  int64_t changed_code = 0;             // of those, made on this setup for code changed since
  std::vector<std::pair<std::string, int64_t>> by_environment;  // Environment::setup_key() -> count
  bool sound() const { return integrity.size() == 1 && integrity[0] == "ok"; }
};
VerifyReport verify_database(Database& db, const Environment& current);

}  // namespace cpgen
