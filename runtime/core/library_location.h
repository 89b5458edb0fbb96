// Where libcpgen itself was loaded from, found at run time so that an installed copy finds its
// data (the shipped caches) beside it wherever the prefix was moved; no path is fixed at
// configure time.
#pragma once

#include <string>

namespace cpgen {

// Absolute, canonical path of the loaded libcpgen shared object; empty if it cannot be told.
std::string library_path();

// True when library_path() is the library in the build tree this copy was compiled in (not an
// installed copy). Only then may the source tree's caches/ folder be used.
bool running_from_build_tree();

}  // namespace cpgen
