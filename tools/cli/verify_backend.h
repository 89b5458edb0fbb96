// Backends that `cpgen verify` can run a vectors problem on. Each backend lives in its own file
// (verify_backend_cpu.cpp here; a GPU one registers the same way from its own file) and
// registers itself, so cmd_verify.cpp does not change when a backend is added.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cpgen/types.h"
#include "runtime/ring/vectors.h"

namespace cpgen::cli {

struct VerifyRequest {
  std::string vectors_path;
  const AttentionVectors* vectors = nullptr;
  Scheme scheme = Scheme::kZigzag;
  int ranks = 1;
  std::string dtype;      // --dtype; empty: the backend's default
  std::string transport;  // --transport; empty: the backend's default
};

// One number compared with its bound; it passes when error <= limit (NaN never passes).
struct VerifyCheck {
  std::string tensor;  // "out", "lse", "dq", "dk", "dv"
  std::string metric;  // e.g. "relative Frobenius", "max abs"
  double error = 0;
  double limit = 0;
  bool passed() const { return error <= limit; }
};

// Full-sequence results in the vectors' layout, gathered from every rank; a tensor the backend
// does not compute stays empty and is left out of --output.
struct VerifyResults {
  std::vector<float> out, lse, dq, dk, dv;
};

struct VerifyReport {
  std::string precision;  // what computed the numbers, e.g. "float32 CPU threads" or a kernel URI
  std::vector<VerifyCheck> checks;
  VerifyResults results;
};

struct VerifyBackend {
  std::string name;     // the --backend value
  std::string summary;  // one line for --help
  // Throws cpgen::Error: kBadInput for an option value the backend does not take.
  std::function<VerifyReport(const VerifyRequest& request)> run;
};

struct VerifyBackendRegistrar {
  explicit VerifyBackendRegistrar(VerifyBackend backend);
};

// nullptr when no backend has that name.
const VerifyBackend* find_verify_backend(const std::string& name);
std::vector<std::string> verify_backend_names();

// The relative Frobenius error of `actual` against `expected`, as a check with bound `limit`.
VerifyCheck relative_check(const std::string& tensor, const std::vector<float>& actual,
                           const std::vector<double>& expected, double limit);

}  // namespace cpgen::cli
