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

// The temporary folder ($TMPDIR, else /tmp). Throws Error(kIo) naming it and what to do where it
// is no folder (a TMPDIR that does not exist was an internal filesystem error).
std::string temp_dir();

// This user's private folder under the temporary directory, <tmp>/cpgen-<euid>, and `sub` in it
// (the emulated backend's compile folders, failed compiles' sources, the kernel store without a
// HOME), each created 0700 as needed. The name is predictable, so another user could make it
// first and swap what cpgen writes and loads there (the emulated kernels are shared objects it
// dlopens): each folder must be a real folder, not a link, owned by this user and writable by no
// one else, or Error(kIo) names it, its owner and mode, and what to do. The effective uid, as
// mkdir gives the folders and the kernel store judges its entries (runtime/jit/kernel_store.cpp).
std::string user_temp_dir(const std::string& sub);

}  // namespace cpgen
