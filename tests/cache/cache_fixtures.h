// Shared fixtures for the cache tests: a fresh temporary folder per test and records built from
// a small vocabulary, so each test states only what it is about.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cache/environment.h"
#include "cache/records.h"
#include "cache/workload.h"

namespace cpgen::testing {

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

// An H200-like environment; `variant` changes the driver version to make a different one.
Environment test_env(const std::string& driver = "13.0");
WorkloadKey test_workload(int64_t q_len = 16384, StepType step = StepType::kDiagonal);
// A record of `w` for the tile (bm, bn, warps, stages); ok with the given median when ms > 0,
// otherwise of the given failing disposition.
Record test_record(const WorkloadKey& w, int bm, int bn, int warps, int stages, double ms,
                   Disposition failed = Disposition::kCompileFailed, const Environment& env = test_env());

}  // namespace cpgen::testing
