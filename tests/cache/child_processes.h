// Running test bodies in forked processes at once: how the cache and tuner tests show that
// several processes sharing one database lose nothing.
#pragma once

#include <functional>
#include <string>

namespace cpgen::testing {

// Forks `processes` children that run body(index) concurrently, each exiting 0 when body returns
// and 1 (after printing "<what> <index> failed: <message>" to stderr) when it throws. Then waits for
// all of them and records a gtest failure for any that did not exit 0. A failed fork or wait is a
// fatal failure: call it inside ASSERT_NO_FATAL_FAILURE.
void run_child_processes(int processes, const std::string& what, const std::function<void(int)>& body);

}  // namespace cpgen::testing
