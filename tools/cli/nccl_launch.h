// Running an NCCL ring from one command on one machine: the command starts N copies of this
// binary as `cpgen _nccl-rank ... --rank r`, one per rank, which meet through an NCCL id file and
// each write a JSON result. With fewer GPUs than ranks each rank gets its own NCCL_HOSTID, so several ranks may share one
// GPU (NCCL then talks over sockets on the loopback interface; for functional checks, slow);
// with as many GPUs as ranks rank r uses device r and NCCL its usual paths.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace cpgen::cli {

// Runs the ranks with `task_args` (the _nccl-rank options other than --rank/--nranks/--id-file/
// --result) and returns each rank's result. Throws Error(kNccl) naming the rank that failed or
// timed out, with the last line of its error output.
std::vector<nlohmann::json> launch_nccl_ranks(int nranks, const std::vector<std::string>& task_args,
                                              int timeout_seconds);

}  // namespace cpgen::cli
