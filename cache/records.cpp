#include "cache/records.h"

#include <chrono>

#include "cpgen/error.h"
#include "runtime/core/enum_names.h"

namespace cpgen {
namespace {

constexpr const char* kRecordColumns =
    "w.dtype, w.head_dim, w.q_heads, w.kv_heads, w.causal, w.batch, w.q_len, w.kv_len, w.scheme, "
    "w.step_type, w.gpu_name, w.arch, w.sm_count, r.kernel_uri, r.disposition, r.median_ms, r.spread_ms, "
    "r.samples_ms, r.tflops, r.registers, r.spill_bytes, r.cpgen_version, r.template_hash, r.nvrtc_version, "
    "r.driver_version, r.gpu_name, r.sm_count, r.source, r.detail, r.created_at";

constexpr const char* kWorkloadColumns =
    "dtype, head_dim, q_heads, kv_heads, causal, batch, q_len, kv_len, scheme, step_type, gpu_name, arch, sm_count";

// The step_type column holds the step type name, followed for a masked workload by a space and
// the mask's canonical name ("diagonal window=256,-1 softcap"). Keeping the mask in that column
// needs no schema change: the column is already part of the workloads table's UNIQUE key and of
// every match, so a masked workload is a row of its own that no unmasked lookup (exact or
// nearest bucket) matches, and every row an older cpgen wrote reads back as unmasked.
std::string step_column(const WorkloadKey& w) {
  std::string text(step_type_name(w.step));
  if (w.mask.any()) text += " " + w.mask.name();
  return text;
}

void read_step_column(const std::string& text, WorkloadKey& w) {
  const size_t space = text.find(' ');
  w.step = parse_step_type(text.substr(0, space));
  if (space != std::string::npos) w.mask = parse_workload_mask(text.substr(space + 1));
}

std::optional<double> opt_double(const Statement& s, int col) {
  if (s.column_is_null(col)) return std::nullopt;
  return s.column_double(col);
}

std::optional<int> opt_int(const Statement& s, int col) {
  if (s.column_is_null(col)) return std::nullopt;
  return static_cast<int>(s.column_int(col));
}

// Reads the 13 workload columns starting at col.
WorkloadKey read_workload(const Statement& s, int col) {
  WorkloadKey w;
  w.dtype = parse_dtype(s.column_text(col + 0));
  w.head_dim = static_cast<int>(s.column_int(col + 1));
  w.q_heads = static_cast<int>(s.column_int(col + 2));
  w.kv_heads = static_cast<int>(s.column_int(col + 3));
  w.causal = s.column_int(col + 4) != 0;
  w.batch = static_cast<int>(s.column_int(col + 5));
  w.q_len = s.column_int(col + 6);
  w.kv_len = s.column_int(col + 7);
  w.scheme = parse_scheme(s.column_text(col + 8));
  read_step_column(s.column_text(col + 9), w);
  w.gpu_name = s.column_text(col + 10);
  w.arch = s.column_text(col + 11);
  w.sm_count = static_cast<int>(s.column_int(col + 12));
  return w;
}

// Binds the 13 workload key columns starting at index first.
void bind_workload(Statement& s, int first, const WorkloadKey& w) {
  s.bind(first + 0, dtype_name(w.dtype)).bind(first + 1, w.head_dim).bind(first + 2, w.q_heads);
  s.bind(first + 3, w.kv_heads).bind(first + 4, w.causal ? 1 : 0).bind(first + 5, w.batch);
  s.bind(first + 6, w.q_len).bind(first + 7, w.kv_len).bind(first + 8, scheme_name(w.scheme));
  s.bind(first + 9, step_column(w)).bind(first + 10, w.gpu_name).bind(first + 11, w.arch);
  s.bind(first + 12, w.sm_count);
}

constexpr const char* kWorkloadMatch =
    "dtype = ? AND head_dim = ? AND q_heads = ? AND kv_heads = ? AND causal = ? AND batch = ? AND q_len = ? AND "
    "kv_len = ? AND scheme = ? AND step_type = ? AND gpu_name = ? AND arch = ? AND sm_count = ?";

// The record of the row `s` stands on; read_record's body.
Record read_record_columns(const Statement& s) {
  Record r;
  r.workload = read_workload(s, 0);
  r.kernel_uri = s.column_text(13);
  r.disposition = parse_disposition(s.column_text(14));
  r.median_ms = opt_double(s, 15);
  r.spread_ms = opt_double(s, 16);
  // Written by cpgen as a JSON array of numbers; anything else is a damaged row, reported as the
  // database's error (which the runtime's lookup falls through), not as a JSON library's.
  try {
    r.samples_ms = nlohmann::json::parse(s.column_text(17)).get<std::vector<double>>();
  } catch (const nlohmann::json::exception&) {
    std::string text = s.column_text(17).substr(0, 40);
    for (char& c : text)
      if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    throw Error(ErrorKind::kDatabase, "a record of " + r.kernel_uri + " in the tuning database " + s.database_file() +
                                          " is damaged: samples_ms '" + text + "' is not a JSON array of numbers");
  }
  r.tflops = opt_double(s, 18);
  r.registers = opt_int(s, 19);
  r.spill_bytes = opt_int(s, 20);
  r.env.cpgen_version = s.column_text(21);
  r.env.template_hash = s.column_text(22);
  r.env.nvrtc_version = s.column_text(23);
  r.env.driver_version = s.column_text(24);
  r.env.gpu_name = s.column_text(25);
  r.env.sm_count = static_cast<int>(s.column_int(26));
  r.source = s.column_text(27);
  r.detail = s.column_text(28);
  r.created_at = s.column_int(29);
  return r;
}

Record read_record(const Statement& s) {
  try {
    return read_record_columns(s);
  } catch (const Error& e) {
    // A text column cpgen wrote that no longer names a dtype, scheme, step type or disposition:
    // the parsers' refusal (bad input, exit 2) is the database's damage, naming its file.
    if (e.kind() != ErrorKind::kBadInput) throw;
    throw Error(ErrorKind::kDatabase, "a record in the tuning database " + s.database_file() + " is damaged: " + e.what());
  }
}

std::optional<int64_t> find_workload(Database& db, const WorkloadKey& w) {
  Statement find = db.prepare(std::string("SELECT id FROM workloads WHERE ") + kWorkloadMatch);
  bind_workload(find, 1, w);
  if (find.step()) return find.column_int(0);
  return std::nullopt;
}

template <typename T>
void bind_optional(Statement& s, int index, const std::optional<T>& value) {
  if (value) {
    s.bind(index, *value);
  } else {
    s.bind_null(index);
  }
}

}  // namespace

int64_t now_unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr std::pair<Disposition, std::string_view> kDispositionNames[] = {
    {Disposition::kOk, "ok"},
    {Disposition::kInfeasible, "infeasible"},
    {Disposition::kCompileFailed, "compile-failed"},
    {Disposition::kWrongResult, "wrong-result"},
    {Disposition::kLaunchFailed, "launch-failed"},
    {Disposition::kNotTimed, "not-timed"}};

std::string_view disposition_name(Disposition d) {
  return enum_name<Disposition>(kDispositionNames, d, "disposition_name");
}

Disposition parse_disposition(std::string_view name) {
  return parse_enum<Disposition>(kDispositionNames, name, "disposition");
}

bool better_record(const Record& candidate, const Record& existing) {
  if (candidate.valid() != existing.valid()) return candidate.valid();
  if (candidate.valid()) return *candidate.median_ms < *existing.median_ms;
  // Two failures: a not-timed record (a budget that ran out, a pattern never timed) says nothing
  // of the kernel, so it never replaces one that does (wrong result, launch or compile failure,
  // infeasible); otherwise the newer one stands.
  const bool candidate_untimed = candidate.disposition == Disposition::kNotTimed;
  const bool existing_untimed = existing.disposition == Disposition::kNotTimed;
  if (candidate_untimed != existing_untimed) return existing_untimed;
  return candidate.created_at > existing.created_at;
}

int64_t ensure_workload(Database& db, const WorkloadKey& w) {
  if (auto id = find_workload(db, w)) return *id;
  Statement insert = db.prepare(std::string("INSERT INTO workloads (") + kWorkloadColumns +
                                ", gqa_group, seq_bucket) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  bind_workload(insert, 1, w);
  insert.bind(14, w.gqa_group()).bind(15, w.seq_bucket());
  insert.run();
  return sqlite3_last_insert_rowid(db.handle());
}

namespace {

// store_record with `replace`: whether r takes the place of a record of the same identity that
// better_record would keep.
StoreResult store_record_as(Database& db, const Record& r, bool replace) {
  const int64_t workload_id = ensure_workload(db, r.workload);
  Statement existing = db.prepare(std::string("SELECT ") + kRecordColumns +
                                  ", r.id FROM records r JOIN workloads w ON w.id = r.workload_id WHERE r.workload_id = ? AND "
                                  "r.kernel_uri = ? AND r.template_hash = ? AND r.nvrtc_version = ? AND r.driver_version = ? AND "
                                  "r.gpu_name = ? AND r.sm_count = ?");
  existing.bind(1, workload_id).bind(2, r.kernel_uri).bind(3, r.env.template_hash).bind(4, r.env.nvrtc_version);
  existing.bind(5, r.env.driver_version).bind(6, r.env.gpu_name).bind(7, r.env.sm_count);
  StoreResult result = StoreResult::kAdded;
  if (existing.step()) {
    if (!replace && !better_record(r, read_record(existing))) return StoreResult::kKept;
    Statement remove = db.prepare("DELETE FROM records WHERE id = ?");
    remove.bind(1, existing.column_int(30)).run();
    result = StoreResult::kReplaced;
  }
  Statement insert = db.prepare(
      "INSERT INTO records (workload_id, kernel_uri, disposition, median_ms, spread_ms, samples_ms, tflops, registers, "
      "spill_bytes, cpgen_version, template_hash, nvrtc_version, driver_version, gpu_name, sm_count, source, detail, "
      "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  insert.bind(1, workload_id).bind(2, r.kernel_uri).bind(3, disposition_name(r.disposition));
  bind_optional(insert, 4, r.median_ms);
  bind_optional(insert, 5, r.spread_ms);
  insert.bind(6, nlohmann::json(r.samples_ms).dump());
  bind_optional(insert, 7, r.tflops);
  bind_optional(insert, 8, r.registers);
  bind_optional(insert, 9, r.spill_bytes);
  insert.bind(10, r.env.cpgen_version).bind(11, r.env.template_hash).bind(12, r.env.nvrtc_version);
  insert.bind(13, r.env.driver_version).bind(14, r.env.gpu_name).bind(15, r.env.sm_count);
  insert.bind(16, r.source).bind(17, r.detail).bind(18, r.created_at);
  insert.run();
  return result;
}

}  // namespace

StoreResult store_record(Database& db, const Record& r) { return store_record_as(db, r, false); }

StoreResult put_record(Database& db, const Record& r) {
  StoreResult result = StoreResult::kKept;
  db.transaction([&] { result = store_record(db, r); });
  return result;
}

StoreResult put_measured_record(Database& db, const Record& r) {
  const bool result_of_a_run = r.disposition == Disposition::kOk || r.disposition == Disposition::kWrongResult ||
                               r.disposition == Disposition::kLaunchFailed;
  StoreResult result = StoreResult::kKept;
  db.transaction([&] {
    result = store_record_as(db, r, result_of_a_run);
    if (!result_of_a_run || r.valid()) return;
    const std::optional<PinnedWinner> pin = pinned_winner(db, r.workload);
    if (pin && pin->kernel_uri == r.kernel_uri && pin->env_key == r.env.key()) unpin_winner(db, r.workload);
  });
  return result;
}

std::vector<Record> records_for(Database& db, const WorkloadKey& w) {
  std::vector<Record> out;
  auto id = find_workload(db, w);
  if (!id) return out;
  Statement select = db.prepare(std::string("SELECT ") + kRecordColumns +
                                " FROM records r JOIN workloads w ON w.id = r.workload_id WHERE r.workload_id = ? ORDER BY r.id");
  select.bind(1, *id);
  while (select.step()) out.push_back(read_record(select));
  return out;
}

std::vector<Record> all_records(Database& db) {
  std::vector<Record> out;
  Statement select = db.prepare(std::string("SELECT ") + kRecordColumns +
                                " FROM records r JOIN workloads w ON w.id = r.workload_id ORDER BY r.id");
  while (select.step()) out.push_back(read_record(select));
  return out;
}

std::vector<WorkloadKey> all_workloads(Database& db) {
  std::vector<WorkloadKey> out;
  Statement select = db.prepare(std::string("SELECT ") + kWorkloadColumns + " FROM workloads ORDER BY id");
  while (select.step()) out.push_back(read_workload(select, 0));
  return out;
}

std::vector<WorkloadKey> sibling_workloads(Database& db, const WorkloadKey& w) {
  std::vector<WorkloadKey> out;
  Statement select = db.prepare(std::string("SELECT ") + kWorkloadColumns +
                                " FROM workloads WHERE dtype = ? AND head_dim = ? AND q_heads = ? AND kv_heads = ? AND "
                                "causal = ? AND batch = ? AND scheme = ? AND step_type = ? AND gpu_name = ? AND arch = ? AND "
                                "sm_count = ? ORDER BY id");
  select.bind(1, dtype_name(w.dtype)).bind(2, w.head_dim).bind(3, w.q_heads).bind(4, w.kv_heads);
  select.bind(5, w.causal ? 1 : 0).bind(6, w.batch).bind(7, scheme_name(w.scheme)).bind(8, step_column(w));
  select.bind(9, w.gpu_name).bind(10, w.arch).bind(11, w.sm_count);
  while (select.step()) out.push_back(read_workload(select, 0));
  return out;
}

std::optional<PinnedWinner> pinned_winner(Database& db, const WorkloadKey& w) {
  Statement select = db.prepare(std::string("SELECT winner_uri, winner_median_ms, winner_env, winner_decided_by FROM workloads WHERE ") +
                                kWorkloadMatch);
  bind_workload(select, 1, w);
  if (!select.step() || select.column_is_null(0)) return std::nullopt;
  return PinnedWinner{select.column_text(0), select.column_double(1), select.column_text(2), select.column_text(3)};
}

void pin_winner(Database& db, const WorkloadKey& w, const PinnedWinner& winner) {
  const int64_t id = ensure_workload(db, w);
  Statement update = db.prepare(
      "UPDATE workloads SET winner_uri = ?, winner_median_ms = ?, winner_env = ?, winner_decided_by = ? WHERE id = ?");
  update.bind(1, winner.kernel_uri).bind(2, winner.median_ms).bind(3, winner.env_key).bind(4, winner.decided_by).bind(5, id);
  update.run();
}

void unpin_winner(Database& db, const WorkloadKey& w) {
  const std::optional<int64_t> id = find_workload(db, w);
  if (!id) return;
  Statement update = db.prepare(
      "UPDATE workloads SET winner_uri = NULL, winner_median_ms = NULL, winner_env = NULL, winner_decided_by = NULL "
      "WHERE id = ?");
  update.bind(1, *id);
  update.run();
}

BestRecord best_record(Database& db, const WorkloadKey& w, const Environment& env) {
  BestRecord best;
  std::optional<PinnedWinner> pin = pinned_winner(db, w);
  std::optional<Record> pinned;
  for (Record& r : records_for(db, w)) {
    const Environment here = env.for_kernel(r.kernel_uri);
    if (!r.env.matches(here)) {
      ++best.other_environment;
      const bool is_pinned = pin && pin->kernel_uri == r.kernel_uri && pin->env_key == r.env.key();
      if (is_pinned && r.env.same_setup(here)) best.winner_changed = true;
      continue;
    }
    if (!r.valid()) continue;
    // The pinned winner is what tune (or rank 0 of a multi-rank tune) decided; it is preferred
    // so that every rank selects the same kernel even if local timings would disagree.
    if (pin && pin->kernel_uri == r.kernel_uri && pin->env_key == r.env.key()) pinned = r;
    if (!best.record || *r.median_ms < *best.record->median_ms) best.record = r;
  }
  if (pinned) best.record = pinned;
  if (best.winner_changed) best.record.reset();
  return best;
}

}  // namespace cpgen
