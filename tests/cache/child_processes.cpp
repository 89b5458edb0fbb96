#include "child_processes.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <vector>

namespace cpgen::testing {

void run_child_processes(int processes, const std::string& what, const std::function<void(int)>& body) {
  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        body(p);
      } catch (const std::exception& e) {
        fprintf(stderr, "%s %d failed: %s\n", what.c_str(), p, e.what());
        code = 1;
      }
      _exit(code);
    }
    children.push_back(pid);
  }
  for (int p = 0; p < processes; ++p) {
    int status = 0;
    ASSERT_EQ(waitpid(children[p], &status, 0), children[p]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << what << " " << p << " status " << status;
  }
}

}  // namespace cpgen::testing
