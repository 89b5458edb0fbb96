#include "tools/cli/verify_backend.h"

#include <cmath>
#include <map>

#include "cpgen/error.h"

namespace cpgen::cli {
namespace {

std::map<std::string, VerifyBackend>& backends() {
  static std::map<std::string, VerifyBackend> registry;
  return registry;
}

}  // namespace

VerifyBackendRegistrar::VerifyBackendRegistrar(VerifyBackend backend) {
  std::string name = backend.name;
  backends().emplace(std::move(name), std::move(backend));
}

Problem request_problem(const VerifyRequest& request, Dtype dtype) {
  Problem p = problem_from_vectors(*request.vectors, request.ranks, request.scheme, dtype);
  p.layout = request.layout;
  return p;
}

std::string layout_note(const VerifyRequest& request) {
  return request.layout.empty() || request.layout == "bhsd" ? "" : ", tensors in layout " + request.layout;
}

namespace {

// One URI where every step ran the same kernel, else "STEP URI, ..."; and whether it was one.
std::pair<std::string, bool> step_kernels_text(const StepKernelNames& steps) {
  bool one = true;
  for (const auto& entry : steps) one = one && entry.second == steps.front().second;
  if (one) return {steps.empty() ? std::string() : steps.front().second, true};
  std::string text;
  for (const auto& [step, uri] : steps) text += (text.empty() ? "" : ", ") + step + " " + uri;
  return {text, false};
}

}  // namespace

std::string ring_kernels_text(const StepKernelNames& forward, const StepKernelNames& backward) {
  const auto [text, one_forward] = step_kernels_text(forward);
  if (backward.empty()) return text;
  const auto [backward_text, one_backward] = step_kernels_text(backward);
  return text + (one_forward && one_backward ? " and " : "; backward: ") + backward_text;
}

const VerifyBackend* find_verify_backend(const std::string& name) {
  auto it = backends().find(name);
  return it == backends().end() ? nullptr : &it->second;
}

std::vector<std::string> verify_backend_names() {
  std::vector<std::string> names;
  for (const auto& [name, backend] : backends()) names.push_back(name);
  return names;
}

namespace {

const std::vector<double>& vectors_tensor(const AttentionVectors& vec, const std::string& tensor) {
  if (tensor == "out") return vec.out;
  if (tensor == "lse") return vec.lse;
  if (tensor == "dq") return vec.dq;
  if (tensor == "dk") return vec.dk;
  if (tensor == "dv") return vec.dv;
  throw Error(ErrorKind::kInternal, "verify: no tensor named '" + tensor + "'");
}

double max_abs_error(const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size())
    throw Error(ErrorKind::kInternal, "verify: sizes differ (" + std::to_string(got.size()) + " vs " +
                                          std::to_string(want.size()) + ")");
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::isinf(want[i]) && got[i] == want[i] ? 0 : std::abs(got[i] - want[i]);
    // NaN sticks: a later finite error must not replace it (a comparison with NaN is false).
    worst = std::isnan(worst) || std::isnan(err) ? NAN : std::max(worst, err);
  }
  return worst;
}

}  // namespace

VerifyCheck check_tensor(const VerifyRequest& request, const std::string& tensor, const std::string& metric,
                         const std::vector<float>& actual, double limit) {
  const bool relative = metric == kRelativeMetric;
  if (!relative && metric != kMaxAbsMetric)
    throw Error(ErrorKind::kInternal, "verify: unknown metric '" + metric + "'");
  double error = 0;
  if (request.sampled) {
    // Computed on first use, after the backend has accepted its options and run: a bad option
    // fails at once, and a forward-only backend never pays for the gradients' full pass.
    const bool gradient = tensor != "out" && tensor != "lse";
    SampledReference& ref = *request.sampled;
    if (ref.out.empty() || (gradient && ref.dq.empty()))
      ref = sampled_reference(*request.vectors, ref.positions, /*with_grads=*/gradient);
    error = relative ? sampled_relative_error(*request.sampled, tensor, actual)
                     : sampled_max_abs_error(*request.sampled, tensor, actual);
  } else {
    const std::vector<double>& expected = vectors_tensor(*request.vectors, tensor);
    error = relative ? relative_error(actual, expected) : max_abs_error(actual, expected);
  }
  return {tensor, metric, error, limit};
}

void add_half_precision_checks(const VerifyRequest& request, VerifyResults&& gathered, bool gradients,
                               VerifyReport* report) {
  report->checks.push_back(check_tensor(request, "out", kRelativeMetric, gathered.out, kHalfTolerance));
  report->checks.push_back(check_tensor(request, "lse", kMaxAbsMetric, gathered.lse, kHalfTolerance));
  if (gradients) {
    report->checks.push_back(check_tensor(request, "dq", kRelativeMetric, gathered.dq, kHalfTolerance));
    report->checks.push_back(check_tensor(request, "dk", kRelativeMetric, gathered.dk, kHalfTolerance));
    report->checks.push_back(check_tensor(request, "dv", kRelativeMetric, gathered.dv, kHalfTolerance));
  }
  report->results = std::move(gathered);
}

}  // namespace cpgen::cli
