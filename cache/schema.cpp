#include "cache/schema.h"

namespace cpgen {

const std::vector<std::string_view>& schema_migrations() {
  static const std::vector<std::string_view> migrations = {
      // 0 -> 1: the initial schema.
      R"sql(
CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
-- A problem's key for one ring step type, plus the device class it was tuned on. q_len and
-- kv_len are the local rows of that step; seq_bucket is q_len rounded up to a power of two and
-- serves the nearest-bucket fallback. The pinned winner is what tune decided (in a multi-rank
-- job: what rank 0 decided and broadcast).
CREATE TABLE workloads (
  id                INTEGER PRIMARY KEY,
  dtype             TEXT    NOT NULL,
  head_dim          INTEGER NOT NULL,
  q_heads           INTEGER NOT NULL,
  kv_heads          INTEGER NOT NULL,
  gqa_group         INTEGER NOT NULL,
  causal            INTEGER NOT NULL,
  batch             INTEGER NOT NULL,
  q_len             INTEGER NOT NULL,
  kv_len            INTEGER NOT NULL,
  seq_bucket        INTEGER NOT NULL,
  scheme            TEXT    NOT NULL,
  step_type         TEXT    NOT NULL,
  gpu_name          TEXT    NOT NULL,
  arch              TEXT    NOT NULL,
  sm_count          INTEGER NOT NULL,
  winner_uri        TEXT,
  winner_median_ms  REAL,
  winner_env        TEXT,
  winner_decided_by TEXT,
  UNIQUE (dtype, head_dim, q_heads, kv_heads, causal, batch, q_len, kv_len, scheme, step_type,
          gpu_name, arch, sm_count)
);
-- One row per attempted candidate and environment. The environment columns decide whether a row
-- may be trusted for selection; cpgen_version is provenance only (template_hash covers the code).
CREATE TABLE records (
  id             INTEGER PRIMARY KEY,
  workload_id    INTEGER NOT NULL REFERENCES workloads(id),
  kernel_uri     TEXT    NOT NULL,
  disposition    TEXT    NOT NULL CHECK (disposition IN ('ok', 'infeasible', 'compile-failed',
                                         'wrong-result', 'launch-failed', 'not-timed')),
  median_ms      REAL,
  spread_ms      REAL,
  samples_ms     TEXT    NOT NULL,
  tflops         REAL,
  registers      INTEGER,
  spill_bytes    INTEGER,
  cpgen_version  TEXT    NOT NULL,
  template_hash  TEXT    NOT NULL,
  nvrtc_version  TEXT    NOT NULL,
  driver_version TEXT    NOT NULL,
  gpu_name       TEXT    NOT NULL,
  sm_count       INTEGER NOT NULL,
  source         TEXT    NOT NULL,
  detail         TEXT    NOT NULL,
  created_at     INTEGER NOT NULL,
  UNIQUE (workload_id, kernel_uri, template_hash, nvrtc_version, driver_version, gpu_name, sm_count)
);
CREATE INDEX records_by_workload ON records (workload_id, disposition, median_ms);
-- Compiled cubins keyed by a hash of (generated source, options, NVRTC version, arch).
CREATE TABLE kernels (
  key           TEXT    PRIMARY KEY,
  uri           TEXT    NOT NULL,
  arch          TEXT    NOT NULL,
  nvrtc_version TEXT    NOT NULL,
  cubin         BLOB    NOT NULL,
  stats         TEXT    NOT NULL,
  created_at    INTEGER NOT NULL
);
)sql",
  };
  return migrations;
}

}  // namespace cpgen
