// Reading a JSON file named on the command line, with one-line errors in the user's terms: a
// folder, a missing or unreadable file and text that is not JSON are all bad input (exit 2), and
// a parse error says where (line and column) and what, without nlohmann's exception prefix.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace cpgen::cli {

// `what` starts each message, e.g. "import". A file (or a device such as /dev/zero) longer than
// kMaxJsonFileBytes (runtime/core/text_file.h) is bad input, read no further.
nlohmann::json read_json_file(const std::string& path, const std::string& what);

}  // namespace cpgen::cli
