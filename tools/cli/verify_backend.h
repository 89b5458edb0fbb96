// Backends that `cpgen verify` can run a vectors problem on. Each backend lives in its own file
// (verify_backend_cpu.cpp here; a GPU one registers the same way from its own file) and
// registers itself, so cmd_verify.cpp does not change when a backend is added.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cpgen/types.h"
#include "runtime/ring/sampled_check.h"
#include "runtime/ring/vectors.h"

namespace cpgen::cli {

struct VerifyRequest {
  std::string vectors_path;                   // empty for a random problem
  const AttentionVectors* vectors = nullptr;  // the inputs; and the expected tensors, unless sampled
  // A random problem (--shape --random): vectors holds only the inputs, and results are compared
  // with this float64 reference on sampled rows. Null for a vectors file. It starts with only
  // the positions; check_tensor computes out and lse on first use, and the gradients the first
  // time a backend checks one (they cost a pass over every query row).
  SampledReference* sampled = nullptr;
  Scheme scheme = Scheme::kZigzag;
  int ranks = 1;
  std::string dtype;      // --dtype; empty: the backend's default
  std::string transport;  // --transport; empty: the backend's default
  std::vector<std::string> specs;  // --spec values (backends that take kernels by URI)
  // The tensor layout the kernel backends hand their shards over in (Problem::layout: a --shape's
  // "layout"; empty, bhsd, for a vectors file). The vectors stay bhsd whatever it is.
  std::string layout;
};

// The ring problem a kernel backend runs: the vectors' shape and mask (problem_from_vectors) over
// the request's ranks and scheme, in `dtype` and the request's layout.
Problem request_problem(const VerifyRequest& request, Dtype dtype);
// ", tensors in layout L" for a layout other than bhsd, for a kernel backend's precision line.
std::string layout_note(const VerifyRequest& request);

// The kernels a ring ran, for a kernel backend's precision line: (step type, URI) in step order,
// forward then backward (empty when none ran). One URI where every step type ran the same one,
// else "STEP URI, ..."; the backward's after " and " when both are one kernel, else after
// "; backward: ".
using StepKernelNames = std::vector<std::pair<std::string, std::string>>;
std::string ring_kernels_text(const StepKernelNames& forward, const StepKernelNames& backward);

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
  std::vector<std::string> notes;  // remarks printed with the report: what was not checked, timings
};

struct VerifyBackend {
  std::string name;     // the --backend value
  std::string summary;  // one line for --help
  // Throws cpgen::Error: kBadInput for an option value the backend does not take.
  std::function<VerifyReport(const VerifyRequest& request)> run;
  bool takes_spec = false;  // whether --spec is allowed (request.specs)
};

struct VerifyBackendRegistrar {
  explicit VerifyBackendRegistrar(VerifyBackend backend);
};

// nullptr when no backend has that name.
const VerifyBackend* find_verify_backend(const std::string& name);
std::vector<std::string> verify_backend_names();

inline constexpr const char* kRelativeMetric = "relative Frobenius";
inline constexpr const char* kMaxAbsMetric = "max abs";

// The error of a gathered tensor ("out", "lse", "dq", "dk", "dv") by `metric` (one of the two
// above), as a check with bound `limit`: against the vectors file's tensor, or on the sampled
// rows of request.sampled. Every backend builds its checks with this, so both sources of a
// problem go through the same backend code.
VerifyCheck check_tensor(const VerifyRequest& request, const std::string& tensor, const std::string& metric,
                         const std::vector<float>& actual, double limit);

// The bound of a bf16/fp16 kernel ring: relative Frobenius for out and the gradients, absolute for lse.
inline constexpr double kHalfTolerance = 2e-2;

// A bf16/fp16 ring's gathered tensors as checks within kHalfTolerance (out and lse; dq, dk and dv
// when `gradients`: the ring ran the backward, else they are empty), appended to report->checks;
// the tensors then move into report->results.
void add_half_precision_checks(const VerifyRequest& request, VerifyResults&& gathered, bool gradients,
                               VerifyReport* report);

}  // namespace cpgen::cli
