// Reads NVRTC's diagnostics to tell an infeasible config from a broken one. The traits header
// (templates/traits.cuh) checks every resource limit with static_assert, so a config that does not
// fit fails to compile with, e.g.
//
//   cpgen/traits.cuh(126): error: static assertion failed with "shared memory exceeds the arch limit"
//
// The tuner records such a kernel as infeasible, not as a compile failure (which is a bug).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cpgen {

// The assertion message(s) ("; "-joined) when every error in `log` is a static assertion that
// failed inside cpgen/traits.cuh; nullopt when there is any other error, or none.
std::optional<std::string> traits_assertion_failure(std::string_view log);

// A compiler's log for a one-line message: its first line that reports an error ("error:"; else its first
// line with text), printable and cut at 300 characters, and how many more lines the log has. A
// failed compile's message carries this and names the file that holds the whole log (a log can
// run to thousands of lines, which the message of an exception, a C ABI error or a tuning record
// should not).
std::string log_summary(std::string_view log);

}  // namespace cpgen
