// cpgen db show|export|import|merge|verify: inspect and exchange the tuning database.
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>

#include "cache/exchange.h"
#include "cache/records.h"
#include "cpgen/error.h"
#include "runtime/core/json_text.h"
#include "runtime/core/text_file.h"
#include "tools/cli/cli_db.h"
#include "tools/cli/store_dir.h"
#include "tools/cli/command.h"

namespace cpgen::cli {

namespace {

using nlohmann::json;

struct DbOptions {
  std::string db;
  bool json_output = false;
  std::string output;      // export -o
  bool defaults = false;   // export --defaults
  std::string input;       // import FILE / merge OTHER
};

std::string ms_or_dash(const std::optional<double>& ms) {
  if (!ms) return "-";
  // %.4f of a huge median (an imported 1e308) ran past the buffer and printed a cut number.
  char buf[32];
  snprintf(buf, sizeof buf, *ms < 1e9 ? "%.4f" : "%.4g", *ms);
  return buf;
}

// "no tuning database at PATH", with where PATH came from when the user did not name it.
[[noreturn]] void no_database(const DbOptions& o) {
  const char* env = std::getenv("CPGEN_DB");
  const std::string origin = !o.db.empty()         ? ""
                             : env && *env         ? " (CPGEN_DB names it)"
                                                   : " (the default; pass --db PATH or set CPGEN_DB)";
  throw_bad_input("no tuning database at " + resolve_db_path(o.db) + origin);
}

// Read-only subcommands never create a database where there is none.
std::unique_ptr<Database> existing(const DbOptions& o) {
  auto db = open_existing_db(o.db);
  if (!db) no_database(o);
  return db;
}

void show(const DbOptions& o) {
  auto db = existing(o);
  const Environment env = current_environment();
  json out = json::array();
  // One snapshot, read again where a tune wrote the file meanwhile (Database::read_consistent).
  db->read_consistent([&] {
    out = json::array();
    for (const WorkloadKey& w : all_workloads(*db)) {
      json item{{"workload", w.to_json()}, {"records", json::object()}};
      std::vector<Record> records = records_for(*db, w);
      for (const Record& r : records) item["records"][std::string(disposition_name(r.disposition))] = item["records"].value(std::string(disposition_name(r.disposition)), 0) + 1;
      BestRecord best = best_record(*db, w, env);
      item["winner"] = best.record ? json(best.record->kernel_uri) : json(nullptr);
      item["winner_median_ms"] = best.record ? json(*best.record->median_ms) : json(nullptr);
      item["other_environment"] = best.other_environment;
      item["winner_changed"] = best.winner_changed;
      out.push_back(item);
    }
  });
  if (o.json_output) {
    std::cout << json{{"db", db->path()}, {"workloads", out}}.dump(2) << "\n";
    return;
  }
  std::cout << "database " << db->path() << ": " << out.size() << " workload(s)\n";
  for (const json& item : out) {
    std::cout << "  " << WorkloadKey::from_json(item["workload"]).describe() << "\n    records:";
    for (const auto& [name, n] : item["records"].items()) std::cout << " " << name << "=" << n.get<int>();
    std::cout << "\n    winner: "
              << (item["winner"].is_null() ? std::string("none for this environment")
                                           : item["winner"].get<std::string>() + " (" + ms_or_dash(item["winner_median_ms"].get<double>()) + " ms)");
    if (item["other_environment"].get<int>() > 0) std::cout << "; " << item["other_environment"].get<int>() << " record(s) of another environment ignored";
    if (item["winner_changed"].get<bool>()) std::cout << "; the tuned winner's kernel has changed since it was timed (tune again)";
    std::cout << "\n";
  }
}

void export_cmd(const DbOptions& o) {
  const bool to_file = !o.output.empty() && o.output != "-";
  if (to_file) {
    check_output_file(o.output, "db export", "-o");
    // Never over the database or its side files (its write-ahead log holds committed rows), with
    // --defaults too, which reads no database but may be given the path of one.
    const std::string db = resolve_db_path(o.db);
    for (const char* suffix : {"", "-wal", "-shm", "-journal"})
      check_distinct_files(o.output, "-o", db + suffix, *suffix ? "the database's side file" : "the database",
                           "db export");
  }
  json doc;
  if (o.defaults) {
    doc = default_heuristic_cache();
  } else {
    auto db = existing(o);
    doc = export_cache(*db, /*leave_out_invalid=*/true);
  }
  const std::string text = cache_text(doc);
  if (!to_file) {
    std::cout << text;
    return;
  }
  write_file_atomically(o.output, o.output, text);  // a failed write leaves the old file
  std::cerr << "cpgen: wrote " << doc["entries"].size() << " entries to " << o.output << "\n";
}

void print_stats(const DbOptions& o, const ImportStats& s, const std::string& what, const std::string& db_path) {
  if (o.json_output) {
    std::cout << json{{"db", db_path}, {"source", what}, {"added", s.added}, {"replaced", s.replaced},
                      {"kept", s.kept}, {"skipped", s.skipped}, {"winners", s.winners}}.dump(2) << "\n";
    return;
  }
  std::cout << what << " -> " << db_path << ": " << s.added << " added, " << s.replaced << " replaced by a faster valid record, "
            << s.kept << " kept (stored record as good or better)";
  if (s.skipped) std::cout << ", " << s.skipped << " default-heuristic entries skipped (they apply from cache files only)";
  std::cout << "; " << s.winners << " winner(s) taken\n";
}

void import_cmd(const DbOptions& o) {
  // Read and validate every entry before the database is opened, so that a bad file neither
  // creates a database nor writes part of itself into one.
  const CacheEntries entries = read_cache_entries(read_json_file(o.input, "import: " + o.input, "a JSON file", kMaxJsonFileBytes, kMaxJsonDepth), o.input);
  auto db = open_db(o.db);
  print_stats(o, store_cache_entries(*db, entries), o.input, db->path());
}

void merge_cmd(const DbOptions& o) {
  std::error_code ec;
  if (!std::filesystem::exists(o.input, ec)) throw_bad_input("merge: no database at " + o.input);
  const std::string target = resolve_db_path(o.db);
  if (same_file(o.input, target)) {
    throw_bad_input("merge: " + o.input + " is the database being merged into (" + target + ")");
  }
  // The source is only read: opened read-only, never moved or repaired.
  const CacheEntries entries = read_database_entries(o.input);
  auto db = open_db(o.db);
  print_stats(o, store_cache_entries(*db, entries), o.input, db->path());
}

void verify_cmd(const DbOptions& o) {
  const std::string path = resolve_db_path(o.db);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) no_database(o);
  std::unique_ptr<Database> db;
  try {
    db = std::make_unique<Database>(path, Database::ReadOnly{});
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kBadInput) throw;
    // A file too damaged to open is verify's answer, not a failure of verify.
    if (o.json_output) {
      std::cout << json{{"db", path}, {"integrity", json::array({e.what()})}, {"sound", false}}.dump(2) << "\n";
    } else {
      std::cout << "database " << path << ": integrity FAILED\n  " << e.what() << "\n";
    }
    set_exit_code(1);
    return;
  }
  VerifyReport r = verify_database(*db, current_environment());
  if (o.json_output) {
    json by_env = json::object();
    for (const auto& [key, n] : r.by_environment) by_env[key] = n;
    std::cout << json{{"db", db->path()}, {"integrity", r.integrity}, {"sound", r.sound()}, {"schema_version", r.schema_version},
                      {"workloads", r.workloads}, {"records", r.records}, {"other_environment", r.other_environment},
                      {"changed_code", r.changed_code}, {"by_environment", by_env}}.dump(2) << "\n";
  } else {
    std::cout << "database " << db->path() << ": integrity " << (r.sound() ? "ok" : "FAILED") << "\n";
    if (!r.sound()) {
      for (const auto& line : r.integrity) std::cout << "  " << line << "\n";
    } else {
      std::cout << "  schema version " << r.schema_version << ", " << r.workloads << " workload(s), " << r.records << " record(s)\n";
      std::cout << "  " << r.other_environment << " record(s) of another environment (kept, ignored for selection)";
      if (r.changed_code > 0) std::cout << ", " << r.changed_code << " of them timed here on kernel code changed since";
      std::cout << "\n";
      if (!r.by_environment.empty()) std::cout << "  records by environment:\n";
      for (const auto& [key, n] : r.by_environment) std::cout << "    " << n << " x " << key << "\n";
    }
  }
  if (!r.sound()) set_exit_code(1);
}

const CommandRegistrar kDb("db", [](CLI::App& root) {
  auto* db = root.add_subcommand("db", "Inspect, export, import, merge and verify the tuning database");
  db->require_subcommand(1);
  auto opts = std::make_shared<DbOptions>();
  // Every subcommand takes --json (README: every command does); export writes JSON either way.
  auto common = [&](CLI::App* sub, bool json_flag) {
    add_db_option(sub, &opts->db);
    sub->add_flag("--json", opts->json_output, json_flag ? "print JSON" : "accepted: the cache is JSON either way");
  };
  auto* show_cmd = db->add_subcommand("show", "List workloads, their records and winners");
  common(show_cmd, true);
  show_cmd->callback([opts] { show(*opts); });

  auto* exp = db->add_subcommand("export", "Write the database as a versioned, diffable JSON cache (stdout or -o FILE)");
  common(exp, false);
  exp->add_option("-o,--output", opts->output, "file to write (default: stdout)");
  exp->add_flag("--defaults", opts->defaults, "write the documented default configs as a pattern cache instead");
  exp->callback([opts] { export_cmd(*opts); });

  auto* imp = db->add_subcommand("import", "Import a JSON cache, keeping the faster valid record of each kernel");
  common(imp, true);
  imp->add_option("file", opts->input, "JSON cache written by cpgen db export")->required();
  imp->callback([opts] { import_cmd(*opts); });

  auto* merge = db->add_subcommand("merge", "Merge another database file, keeping the faster valid record of each kernel");
  common(merge, true);
  merge->add_option("other", opts->input, "the database to merge from")->required();
  merge->callback([opts] { merge_cmd(*opts); });

  auto* ver = db->add_subcommand("verify", "Run PRAGMA integrity_check and count rows of other environments");
  common(ver, true);
  ver->callback([opts] { verify_cmd(*opts); });
});

}  // namespace
}  // namespace cpgen::cli
