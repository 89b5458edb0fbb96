// Several processes writing one database, and a process killed while writing: the two ways a
// tuning database is used on a shared machine and the two ways it could be damaged.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "cache/database.h"
#include "cache/records.h"
#include "cache_fixtures.h"
#include "child_processes.h"

namespace cpgen::testing {
namespace {

class ConcurrencyTest : public TempDirTest {};

// Record i of writer `process`: its own workload length, so every (process, i) is a distinct
// identity and "all records present" is a plain count.
Record writer_record(int process, int i) {
  WorkloadKey w = test_workload(1024 * (1 + process));
  // Tiles cycle through valid (bm, warps) pairs; the index is carried in the stage count and the
  // sample values, and the identity in the (workload, uri, driver) triple.
  Record r = test_record(w, 128, 64, 4, 1 + i % 4, 1.0 + i, Disposition::kCompileFailed, test_env("d" + std::to_string(i)));
  r.samples_ms.assign(200, 1.0 + i);
  return r;
}

TEST_F(ConcurrencyTest, FourProcessesWritingAtOnceLoseNothing) {
  const std::string db_path = path("shared.db");
  constexpr int kProcesses = 4;
  constexpr int kRecordsEach = 60;
  ASSERT_NO_FATAL_FAILURE(run_child_processes(kProcesses, "writer", [&](int p) {
    // Every child opens the file itself, racing the others through creation and migration.
    Database db(db_path);
    for (int i = 0; i < kRecordsEach; ++i) put_record(db, writer_record(p, i));
  }));
  Database db(db_path);
  EXPECT_EQ(db.integrity_check(), std::vector<std::string>{"ok"});
  std::vector<Record> records = all_records(db);
  ASSERT_EQ(records.size(), static_cast<size_t>(kProcesses * kRecordsEach));
  std::set<std::pair<int64_t, std::string>> seen;
  for (const Record& r : records) seen.insert({r.workload.q_len, r.env.driver_version});
  for (int p = 0; p < kProcesses; ++p) {
    for (int i = 0; i < kRecordsEach; ++i) {
      EXPECT_TRUE(seen.count({1024 * (1 + p), "d" + std::to_string(i)})) << "process " << p << " record " << i;
    }
  }
}

TEST_F(ConcurrencyTest, SigkillDuringWritesKeepsEveryCommittedRecord) {
  const std::string db_path = path("killed.db");
  { Database create(db_path); }
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(pipe_fds[0]);
    try {
      Database db(db_path);
      for (int i = 0;; ++i) {
        put_record(db, writer_record(0, i));
        // Reported only after COMMIT returned: the parent may rely on every reported index.
        if (write(pipe_fds[1], &i, sizeof i) != sizeof i) _exit(3);
      }
    } catch (...) {
      _exit(2);
    }
  }
  close(pipe_fds[1]);
  std::vector<int> committed;
  int index = 0;
  while (committed.size() < 150 && read(pipe_fds[0], &index, sizeof index) == sizeof index) committed.push_back(index);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  while (read(pipe_fds[0], &index, sizeof index) == sizeof index) committed.push_back(index);
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the writer ended on its own: " << status;
  ASSERT_GE(committed.size(), 150u);

  Database db(db_path);
  EXPECT_TRUE(db.moved_aside_to().empty()) << "a killed writer must not leave a file that looks damaged";
  EXPECT_EQ(db.integrity_check(), std::vector<std::string>{"ok"});
  std::set<std::string> present;
  for (const Record& r : all_records(db)) present.insert(r.env.driver_version);
  for (int i : committed) EXPECT_TRUE(present.count("d" + std::to_string(i))) << "committed record " << i << " is missing";
  EXPECT_GE(present.size(), committed.size());
}

}  // namespace
}  // namespace cpgen::testing
