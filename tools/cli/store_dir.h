// Checking a --store DIR before any work: a file in its place, or a folder that cannot be made or
// written, is bad input (exit 2) up front, rather than compiles that report success while every
// store write fails.
#pragma once

#include <string>

namespace cpgen::cli {

// `what` starts the message, e.g. "compile".
void check_store_dir(const std::string& dir, const std::string& what);

// The same for a file a command will write (verify --output): its folder must exist and be
// writable, and the path must not be a folder.
void check_output_file(const std::string& path, const std::string& what, const std::string& option);

}  // namespace cpgen::cli
