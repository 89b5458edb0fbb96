// The GPU backend of `cpgen verify` (the command itself lives in cmd_verify.cpp, branch math):
// runs the forward ring of one vectors case on the GPU and measures it against the file's
// float64 expectations with the tolerances of shared/vectors/README.md.
#pragma once

#include <string>

#include "cpgen/types.h"
#include "runtime/vectors.h"

namespace cpgen::cli {

struct GpuVerifyOutcome {
  std::string kernel_uri;
  double out_rel_error = 0;      // relative Frobenius error of out
  double lse_max_abs_error = 0;  // max |lse - expected|
  bool passed = false;
};

// transport: "loopback" (cp_size virtual ranks on device 0) or "nccl" (one process per rank
// reading vectors_path, nccl_launch.h). Throws kNoDevice without a GPU with
// one line saying so, kBadInput for an unknown transport or a case the ring cannot run (sliding
// windows).
GpuVerifyOutcome verify_gpu(const std::string& vectors_path, const AttentionVectors& vectors, int ranks, Scheme scheme, Dtype dtype,
                            const std::string& transport);

}  // namespace cpgen::cli
