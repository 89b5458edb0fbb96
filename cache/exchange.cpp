#include "cache/exchange.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <tuple>
#include <type_traits>

#include "cache/json_integer.h"
#include "cpgen/error.h"
#include "generator/kernel_spec.h"
#include "generator/kernel_spec_wgmma.h"
#include "runtime/core/json_text.h"
#include "runtime/core/problem_limits.h"

namespace cpgen {
namespace {

using nlohmann::json;

template <typename T>
json optional_json(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

template <typename T>
std::optional<T> optional_field(const json& entry, const char* name, const std::string& where) {
  if (!entry.contains(name) || entry[name].is_null()) return std::nullopt;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const std::optional<T> value = exact_integer<T>(entry[name]);
    if (!value)
      throw_bad_input(where + ": field '" + name + "' must be " + integer_range_text<T>() + ", got " + entry[name].dump());
    return value;
  }
  try {
    return entry[name].get<T>();
  } catch (const json::exception&) {
    throw_bad_input(where + ": field '" + name + "' has the wrong type (" + entry[name].dump() + ")");
  }
}

template <typename T>
T required_field(const json& entry, const char* name, const std::string& where) {
  auto value = optional_field<T>(entry, name, where);
  if (!value) throw_bad_input(where + ": field '" + name + "' is missing");
  return *value;
}

std::string sort_key(const json& entry) {
  return entry["workload"].dump() + "|" + entry["kernel"].get<std::string>() + "|" +
         (entry.contains("environment") ? entry["environment"].dump() : std::string());
}

}  // namespace

json record_to_json(const Record& r, bool winner) {
  json entry;
  entry["workload"] = r.workload.to_json();
  entry["kernel"] = r.kernel_uri;
  entry["disposition"] = disposition_name(r.disposition);
  entry["median_ms"] = optional_json(r.median_ms);
  entry["spread_ms"] = optional_json(r.spread_ms);
  entry["samples_ms"] = r.samples_ms;
  entry["tflops"] = optional_json(r.tflops);
  entry["registers"] = optional_json(r.registers);
  entry["spill_bytes"] = optional_json(r.spill_bytes);
  entry["environment"] = r.env.to_json();
  entry["source"] = r.source;
  entry["detail"] = r.detail;
  entry["created_at"] = r.created_at;
  entry["winner"] = winner;
  return entry;
}

namespace {

// Refuses a field `object` has that `known` (an object of the same kind as written) lacks: a
// misspelt field ("winer") was ignored, and the entry imported without what it meant to say.
void refuse_unknown_fields(const json& object, const json& known, const std::string& where, const char* what) {
  if (!object.is_object()) return;  // the field readers say what the value must be
  for (const auto& [name, unused] : object.items())
    if (!known.contains(name))
      throw_bad_input(where + ": " + what + " field '" + printable(name, 80) + "' is not one cpgen writes; allowed: " +
                      field_names(known));
}

// The fields an entry, its workload and its environment may have: those record_to_json writes
// (a workload with its mask fields).
const json& entry_fields() {
  static const json fields = [] {
    Record model;
    model.workload.mask.window_left = 0;  // so that to_json lists the mask fields
    return record_to_json(model, false);
  }();
  return fields;
}

}  // namespace

std::string field_names(const json& object) {
  std::string names;
  for (const auto& [name, unused] : object.items()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

void check_winner(const Record& r, bool winner, const std::string& where) {
  if (winner && !r.valid())
    throw_bad_input(where + ": field 'winner' is true on an entry of disposition '" +
                    std::string(disposition_name(r.disposition)) + "'" + (r.median_ms ? "" : " and no median") +
                    "; only a timed 'ok' entry can be a winner");
}

void check_entry_fields(const json& entry, const std::string& where) {
  const json& known = entry_fields();
  refuse_unknown_fields(entry, known, where, "entry");
  if (entry.is_object() && entry.contains("environment"))
    refuse_unknown_fields(entry["environment"], known["environment"], where, "environment");
}

Record record_from_json(const json& entry, const std::string& where) {
  if (!entry.is_object()) throw_bad_input(where + ": an entry must be a JSON object");
  check_entry_fields(entry, where);
  if (entry.contains("workload")) refuse_unknown_fields(entry["workload"], entry_fields()["workload"], where, "workload");
  Record r;
  if (!entry.contains("workload")) throw_bad_input(where + ": field 'workload' is missing");
  // required_field names `where` itself (inside the try below, its message got the prefix twice).
  r.kernel_uri = required_field<std::string>(entry, "kernel", where);
  const std::string disposition = required_field<std::string>(entry, "disposition", where);
  try {
    r.workload = WorkloadKey::from_json(entry["workload"]);
    r.env = Environment::from_json(entry.contains("environment") ? entry["environment"] : json());
    KernelSpec::parse(r.kernel_uri);  // rejects a malformed kernel name up front
    r.disposition = parse_disposition(disposition);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kBadInput) throw;
    throw_bad_input(where + ": " + e.what());
  }
  r.median_ms = optional_field<double>(entry, "median_ms", where);
  r.spread_ms = optional_field<double>(entry, "spread_ms", where);
  r.samples_ms = optional_field<std::vector<double>>(entry, "samples_ms", where).value_or(std::vector<double>{});
  r.tflops = optional_field<double>(entry, "tflops", where);
  r.registers = optional_field<int>(entry, "registers", where);
  r.spill_bytes = optional_field<int>(entry, "spill_bytes", where);
  r.source = optional_field<std::string>(entry, "source", where).value_or("measured");
  r.detail = optional_field<std::string>(entry, "detail", where).value_or("");
  r.created_at = optional_field<int64_t>(entry, "created_at", where).value_or(0);
  validate_record(r, where);
  return r;
}

namespace {

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

void require_time(const std::optional<double>& ms, const char* field, const std::string& where) {
  if (ms && !(std::isfinite(*ms) && *ms > 0)) {
    throw_bad_input(where + ": field '" + field + "' must be a finite number of milliseconds > 0, got " + number_text(*ms));
  }
}

}  // namespace

void validate_record(const Record& r, const std::string& where) {
  const WorkloadKey& w = r.workload;
  auto bad = [&](const std::string& field, const std::string& what) { throw_bad_input(where + ": field '" + field + "' " + what); };
  if (std::find(std::begin(kSupportedHeadDims), std::end(kSupportedHeadDims), w.head_dim) == std::end(kSupportedHeadDims)) {
    bad("workload.head_dim", std::to_string(w.head_dim) + " is not a supported head dim");
  }
  if (w.kv_heads <= 0 || w.q_heads <= 0 ||
      std::find(std::begin(kSupportedGqaGroups), std::end(kSupportedGqaGroups), w.gqa_group()) == std::end(kSupportedGqaGroups)) {
    bad("workload.q_heads", "q_heads " + std::to_string(w.q_heads) + " / kv_heads " + std::to_string(w.kv_heads) +
                                " is not a supported GQA group");
  }
  // A problem's own limits (runtime/core/problem_limits.h): no step of a valid problem is larger,
  // and 2^62 + 1 keys made seq_bucket's doubling wrap and never end.
  const auto in_range = [&](const char* field, int64_t value, int64_t max) {
    if (value < 1 || value > max)
      bad(field, "must be an integer 1.." + std::to_string(max) + ", got " + std::to_string(value));
  };
  in_range("workload.batch", w.batch, kMaxBatch);
  in_range("workload.q_len", w.q_len, kMaxSeqLen);
  in_range("workload.kv_len", w.kv_len, kMaxSeqLen);
  try {
    validate_arch(w.arch);
  } catch (const Error& e) {
    bad("workload.arch", std::string(": ") + e.what());
  }
  KernelSpec spec;
  try {
    spec = KernelSpec::parse(r.kernel_uri);
  } catch (const Error& e) {
    bad("kernel", std::string(": ") + e.what());
  }
  if (!runs_step(spec.kind, is_backward(w.step))) {
    bad("kernel", r.kernel_uri + " does not run a " + std::string(step_type_name(w.step)) + " step; a " +
                      (is_backward(w.step) ? "backward step runs a ring_bwd_ step kernel"
                                           : "forward step runs a ring_fwd_ kernel (mma.sync or wgmma)"));
  }
  const KernelSpec wanted = KernelSpec::default_for(w.dtype, w.head_dim, w.causal, w.gqa_group());
  if (spec.dtype != wanted.dtype || spec.head_dim != wanted.head_dim || spec.causal != wanted.causal ||
      spec.gqa_group != wanted.gqa_group || spec.key_intervals != w.mask.key_intervals() || spec.softcap != w.mask.softcap) {
    bad("kernel", r.kernel_uri + " is not built for the entry's workload (" + std::string(dtype_name(w.dtype)) + " hd" +
                      std::to_string(w.head_dim) + (w.causal ? " causal" : " full") +
                      (w.mask.any() ? " mask " + w.mask.name() : std::string()) + " gqa" + std::to_string(w.gqa_group()) +
                      "); a kernel fits only the dtype, head dim, mask and GQA group it was built for");
  }
  if (r.disposition != Disposition::kInfeasible) {
    const Feasibility f = check_feasibility(spec, w.arch);
    if (!f.feasible) bad("kernel", r.kernel_uri + " does not fit " + w.arch + ": " + f.reason);
  }
  require_time(r.median_ms, "median_ms", where);
  require_time(r.tflops, "tflops", where);
  if (r.spread_ms && !(std::isfinite(*r.spread_ms) && *r.spread_ms >= 0)) {
    bad("spread_ms", "must be a finite number >= 0, got " + number_text(*r.spread_ms));
  }
  for (size_t i = 0; i < r.samples_ms.size(); ++i) {
    if (!(std::isfinite(r.samples_ms[i]) && r.samples_ms[i] > 0)) {
      bad("samples_ms[" + std::to_string(i) + "]", "must be a finite number of milliseconds > 0, got " + number_text(r.samples_ms[i]));
    }
  }
  if (r.disposition == Disposition::kOk) {
    if (!r.median_ms) bad("median_ms", "is missing; an 'ok' entry needs its median time");
    if (r.samples_ms.empty()) bad("samples_ms", "is missing or empty; an 'ok' entry needs the timings it was measured from");
  }
  if (r.registers && *r.registers < 0) bad("registers", "must be >= 0, got " + std::to_string(*r.registers));
  if (r.spill_bytes && *r.spill_bytes < 0) bad("spill_bytes", "must be >= 0, got " + std::to_string(*r.spill_bytes));
  if (r.created_at < 0) bad("created_at", "must be >= 0 (unix seconds), got " + std::to_string(r.created_at));
}

json export_cache(Database& db, bool leave_out_invalid) {
  std::vector<json> entries;
  std::vector<std::string> left_out;
  // One snapshot: the records and their pins read in one transaction. A read-only open that took
  // no lock (no writer when it began) is read again, through the writer's log, when a writer
  // changed the file meanwhile: such a read may hold rows of two commits or miss the newest.
  db.read_consistent([&] {
    entries.clear();
    left_out.clear();
    for (const Record& r : all_records(db)) {
      // What import would refuse (a damaged or hand-edited row, one an older import let in).
      if (leave_out_invalid) {
        try {
          validate_record(r, "record of " + r.kernel_uri + " for " + r.workload.describe());
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::kBadInput) throw;
          left_out.push_back(e.what());
          continue;
        }
      }
      auto pin = pinned_winner(db, r.workload);
      bool winner = pin && pin->kernel_uri == r.kernel_uri && pin->env_key == r.env.key();
      entries.push_back(record_to_json(r, winner));
    }
  });
  for (const std::string& why : left_out) warn("db export leaves out a record import would refuse: " + why);
  std::sort(entries.begin(), entries.end(), [](const json& a, const json& b) { return sort_key(a) < sort_key(b); });
  return json{{"format", kCacheFormatName}, {"version", kCacheFormatVersion}, {"entries", entries}};
}

std::string cache_text(const json& doc) { return doc.dump(2) + "\n"; }

void check_cache_header(const json& doc, const std::string& where) {
  if (!doc.is_object() || !doc.contains("format") || doc["format"] != kCacheFormatName) {
    throw_bad_input(where + ": not a cpgen tuning cache (expected \"format\": \"" + kCacheFormatName + "\")");
  }
  if (!doc.contains("version") || !doc["version"].is_number_integer()) {
    throw_bad_input(where + ": field 'version' is missing or not an integer");
  }
  const std::optional<int> version = exact_integer<int>(doc["version"]);
  if (!version || *version < 1 || *version > kCacheFormatVersion) {
    throw_bad_input(where + ": cache format version " + doc["version"].dump() + " is not supported; this build reads 1.." +
                    std::to_string(kCacheFormatVersion));
  }
  if (!doc.contains("entries") || !doc["entries"].is_array()) {
    throw_bad_input(where + ": field 'entries' is missing or not an array");
  }
  refuse_unknown_fields(doc, json{{"format", ""}, {"version", 0}, {"entries", json::array()}}, where, "top-level");
}

bool is_heuristic_entry(const json& entry, const std::string& at) {
  return entry.is_object() && optional_field<std::string>(entry, "source", at) == "default-heuristic";
}

bool entry_winner(const json& entry, const std::string& at) {
  if (!entry.is_object() || !entry.contains("winner")) return false;
  if (!entry["winner"].is_boolean()) throw_bad_input(at + ": field 'winner' must be true or false");
  return entry["winner"].get<bool>();
}

CacheEntries read_cache_entries(const json& doc, const std::string& where) {
  check_cache_header(doc, where);
  CacheEntries out;
  const json& entries = doc["entries"];
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string at = where + " entry " + std::to_string(i);
    if (is_heuristic_entry(entries[i], at)) {
      ++out.skipped;
      continue;
    }
    const bool winner = entry_winner(entries[i], at);
    Record r = record_from_json(entries[i], at);
    check_winner(r, winner, at);
    // Keyed before a causal window's right side counted as moot (workload_mask_of): no lookup
    // asks for such a key any more, so it would only sit in the database.
    if (r.workload.causal && r.workload.mask.window_right >= 0) {
      warn(at + ": a causal workload keyed with window_right " + std::to_string(r.workload.mask.window_right) +
           ", which causal makes moot (such keys are no longer looked up); left out");
      continue;
    }
    out.records.emplace_back(std::move(r), winner);
  }
  return out;
}

CacheEntries read_database_entries(const std::string& other_path) {
  Database other(other_path, Database::ReadOnly{.check_integrity = true, .merge_source = true});
  return read_cache_entries(export_cache(other), other_path);
}

ImportStats store_cache_entries(Database& db, const CacheEntries& entries) {
  ImportStats stats;
  db.transaction([&] {
    ImportStats s;
    s.skipped = entries.skipped;
    for (const auto& [record, winner] : entries.records) {
      switch (store_record(db, record)) {
        case StoreResult::kAdded: ++s.added; break;
        case StoreResult::kReplaced: ++s.replaced; break;
        case StoreResult::kKept: ++s.kept; break;
      }
      if (!winner || !record.valid()) continue;
      // Keep the faster pinned winner of the two sides.
      auto pin = pinned_winner(db, record.workload);
      if (!pin || *record.median_ms < pin->median_ms) {
        pin_winner(db, record.workload, {record.kernel_uri, *record.median_ms, record.env.key(), "import"});
        ++s.winners;
      }
    }
    stats = s;
  });
  return stats;
}

ImportStats import_cache(Database& db, const json& doc, const std::string& where) {
  // Everything is read and validated first: a bad entry rejects the whole file before anything is written.
  return store_cache_entries(db, read_cache_entries(doc, where));
}

ImportStats merge_database(Database& db, const std::string& other_path) {
  if (other_path == db.path()) throw_bad_input("cannot merge the database " + other_path + " into itself");
  return store_cache_entries(db, read_database_entries(other_path));
}

json default_heuristic_cache() {
  std::vector<json> entries;
  const auto add = [&](const KernelSpec& s, json workload, const char* detail) {
    workload.update({{"dtype", dtype_name(s.dtype)}, {"head_dim", s.head_dim}, {"causal", s.causal},
                     {"gqa_group", s.gqa_group}});
    entries.push_back({{"workload", std::move(workload)}, {"kernel", s.uri()}, {"disposition", "not-timed"},
                       {"source", "default-heuristic"}, {"detail", detail}});
  };
  for (const KernelSpec& s : KernelSpec::all_defaults()) add(s, json::object(), "KernelSpec::default_for; never timed");
  // The sm_90a defaults of the wgmma family (forward_default_for_arch). They name the arch, so
  // they sort before the patterns that do not ("arch" < "causal"), and the lookup takes the first
  // pattern that matches: on sm_90a these, elsewhere the mma.sync entries above.
  for (const WgmmaDefaultShape& shape : kWgmmaDefaultShapes)
    for (bool causal : {false, true})
      add(forward_default_for_arch(shape.dtype, shape.head_dim, causal, shape.gqa_group, kWgmmaArch),
          {{"arch", kWgmmaArch}}, "forward_default_for_arch on sm_90a (the wgmma family); never timed as an entry");
  std::sort(entries.begin(), entries.end(), [](const json& a, const json& b) { return sort_key(a) < sort_key(b); });
  return json{{"format", kCacheFormatName}, {"version", kCacheFormatVersion}, {"entries", entries}};
}

VerifyReport verify_database(Database& db, const Environment& current) {
  VerifyReport report;
  // One snapshot: a check without a lock that overlapped a writer's checkpoint could call a sound
  // file damaged; read_consistent checks again where the file changed meanwhile.
  db.read_consistent([&] {
    report = VerifyReport{};
    report.integrity = db.integrity_check();
    if (!report.sound()) return;  // counting rows of a damaged file could fail or mislead
    report.schema_version = db.schema_version();
    Statement workloads = db.prepare("SELECT count(*) FROM workloads");
    workloads.step();
    report.workloads = workloads.column_int(0);
    std::map<std::string, int64_t> by_env;
    for (const Record& r : all_records(db)) {
      ++report.records;
      ++by_env[r.env.setup_key()];
      const Environment here = current.for_kernel(r.kernel_uri);
      if (r.env.matches(here)) continue;
      ++report.other_environment;
      if (r.env.same_setup(here)) ++report.changed_code;
    }
    report.by_environment.assign(by_env.begin(), by_env.end());
  });
  return report;
}

}  // namespace cpgen
