// Where cpgen keeps per-user files: $XDG_CACHE_HOME/cpgen, else $HOME/.cache/cpgen. The
// compiled-kernel store (runtime/jit/kernel_store.h) and the tuning database (cache/database.h) both
// default to places under it, so the two never disagree about which variables count.
#pragma once

#include <string>

namespace cpgen {

// The value of an environment variable, "" when it is unset or empty.
std::string env_or_empty(const char* name);
// $XDG_CACHE_HOME/cpgen, else $HOME/.cache/cpgen; "" when neither variable is set.
std::string user_cache_dir();

}  // namespace cpgen
