// The arguments of a communicator a caller asks for (nccl_comm_init, nccl_comm_from_file and the C
// ABI's cpgen_nccl_comm_init_rank), checked before NCCL is touched, so a build without NCCL and one
// with it answer a bad rank alike. Header only: the C ABI and the bootstrap share it in both builds.
#pragma once

#include <string>
#include <string_view>

#include "cpgen/error.h"

namespace cpgen {

// Throws Error(kBadInput) naming `function` and the argument: nranks 1 and up, rank in
// [0, nranks), device 0 and up.
inline void check_nccl_rank_args(std::string_view function, int rank, int nranks, int device) {
  const std::string fn(function);
  if (nranks < 1) throw_bad_input(fn + ": nranks " + std::to_string(nranks) + " is not allowed; allowed: 1 and up");
  if (rank < 0 || rank >= nranks)
    throw_bad_input(fn + ": rank " + std::to_string(rank) + " is outside [0, nranks " + std::to_string(nranks) + ")");
  if (device < 0)
    throw_bad_input(fn + ": device " + std::to_string(device) + " is not a device ordinal; allowed: 0 and up");
}

}  // namespace cpgen
