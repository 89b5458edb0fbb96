// Checking a --store DIR before any work: a file in its place, or a folder that cannot be made or
// written, is bad input (exit 2) up front, rather than compiles that report success while every
// store write fails.
#pragma once

#include <string>

namespace cpgen::cli {

// `what` starts the message, e.g. "compile"; `option` names where the folder came from
// ("--store", or "the kernel store ($CPGEN_KERNEL_DIR or the default)"). Without `writable` only
// what can never be a store is refused (a file, a link to nothing): a read-only store that was
// filled ahead of a job is a store to read.
void check_store_dir(const std::string& dir, const std::string& what, const std::string& option = "--store",
                     bool writable = true);

// The same for a file a command will write (verify --output, db export -o, compile --emit-*):
// its folder must exist and be writable, and the path must not be a folder.
void check_output_file(const std::string& path, const std::string& what, const std::string& option);

// Whether two paths name one file: the same file where both exist (links and relative paths
// included), else the same normalized absolute path.
bool same_file(const std::string& a, const std::string& b);

// An output that is a command's input (or another of its outputs) is bad input: `what: option
// output is the same file as other_option other; ...`. Nothing when either path is empty.
void check_distinct_files(const std::string& output, const std::string& option, const std::string& other,
                          const std::string& other_option, const std::string& what);

}  // namespace cpgen::cli
