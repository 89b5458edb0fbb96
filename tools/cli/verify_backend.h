// Backends that `cpgen verify` can run a vectors problem on. Each backend lives in its own file
// (verify_backend_cpu.cpp; a GPU one is added the same way) and registers itself, so cmd_verify
// never changes when a backend is added.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cpgen/types.h"
#include "runtime/vectors.h"

namespace cpgen::cli {

// Full-sequence results in the vectors' layout, gathered from every rank.
struct VerifyResults {
  std::vector<float> out, lse, dq, dk, dv;
};

struct VerifyBackend {
  std::string name;         // the --backend value
  std::string precision;    // what the numbers were computed in, for the report
  double tolerance = 0;     // relative Frobenius error bound for every tensor
  // Runs forward and backward over `ranks` ranks split with `scheme`. Throws cpgen::Error.
  std::function<VerifyResults(const AttentionVectors& vectors, Scheme scheme, int ranks)> run;
};

struct VerifyBackendRegistrar {
  explicit VerifyBackendRegistrar(VerifyBackend backend);
};

// nullptr when no backend has that name.
const VerifyBackend* find_verify_backend(const std::string& name);
std::vector<std::string> verify_backend_names();

}  // namespace cpgen::cli
