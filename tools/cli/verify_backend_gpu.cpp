// `cpgen verify --backend gpu`: the forward and backward rings on the GPU with the generated kernels, over
// the loopback transport (cp_size virtual ranks on GPU 0, the default) or NCCL (one process per
// rank, nccl_launch.h): out and lse against the vectors' float64 values with the bf16/fp16
// tolerances of docs/formats.md, and, when the vectors have gradients (or the problem is
// --random), the backward ring's dq, dk, dv (relative Frobenius below 2e-2, issue 10), all
// outputs poisoned to NaN before the run. Without a GPU: exit 1 with one line.
#include <cmath>
#include <vector>

#include "cpgen/error.h"
#include "cpgen/nccl_bootstrap.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/api/gpu_ring_run.h"
#include "tools/cli/nccl_launch.h"
#include "runtime/ring/kernel_support.h"
#include "tools/cli/verify_backend.h"

namespace cpgen::cli {
namespace {

VerifyCheck lse_check(double max_abs) { return {"lse", "max abs", max_abs, kHalfTolerance}; }

// One process per rank; each compares its own shard and reports sums that combine here.
VerifyReport run_nccl(const VerifyRequest& r, Dtype dtype) {
  if (!nccl_available())
    throw Error(ErrorKind::kNccl, "verify --transport nccl: this cpgen was built without NCCL");
  const std::vector<nlohmann::json> ranks = launch_nccl_ranks(
      r.ranks,
      {"--task", "verify", "--vectors", r.vectors_path, "--scheme", std::string(scheme_name(r.scheme)),
       "--dtype", std::string(dtype_name(dtype))},
      600);
  double sq_diff = 0, sq_ref = 0, lse_max = 0;
  for (const auto& j : ranks) {
    const double d = j["sq_diff"].get<double>(), l = j["lse_max"].get<double>();
    sq_diff = d < 0 || std::isnan(sq_diff) ? NAN : sq_diff + d;
    sq_ref += j["sq_ref"].get<double>();
    lse_max = l < 0 || std::isnan(lse_max) ? NAN : std::max(lse_max, l);
  }
  VerifyReport report;
  report.precision = std::string(dtype_name(dtype)) + " step kernel, NCCL ring of " +
                     std::to_string(r.ranks) + " processes";
  report.checks = {{"out", "relative Frobenius", sq_ref > 0 ? std::sqrt(sq_diff / sq_ref) : std::sqrt(sq_diff),
                    kHalfTolerance},
                   lse_check(lse_max)};
  // Gradients, when the ranks ran the backward (the vectors file has them).
  for (const char* grad : {"dq", "dk", "dv"}) {
    double d = 0, ref = 0;
    bool present = true;
    for (const auto& j : ranks) {
      if (!j.contains("grads")) {
        present = false;
        break;
      }
      const double rd = j["grads"][grad]["sq_diff"].get<double>();
      d = rd < 0 || std::isnan(d) ? NAN : d + rd;
      ref += j["grads"][grad]["sq_ref"].get<double>();
    }
    if (present)
      report.checks.push_back({grad, kRelativeMetric, ref > 0 ? std::sqrt(d / ref) : std::sqrt(d), kHalfTolerance});
  }
  return report;  // the tensors stay with the ranks: --output gets none
}

VerifyReport run_gpu(const VerifyRequest& r) {
  const AttentionVectors& vec = *r.vectors;
  Dtype dtype = Dtype::kBf16;
  try {
    if (!r.dtype.empty()) dtype = parse_dtype(r.dtype);
  } catch (const Error& e) {
    throw_bad_input("--dtype: " + std::string(e.what()));
  }
  const std::string transport = r.transport.empty() ? "loopback" : r.transport;
  if (transport != "loopback" && transport != "nccl")
    throw_bad_input("--transport " + transport + " is not supported by --backend gpu; allowed: loopback, nccl");
  // The rank processes read the vectors file themselves; a random problem exists only here.
  if (transport == "nccl" && r.sampled)
    throw_bad_input("--transport nccl needs --vectors; a --random problem runs on --transport loopback");
  const Problem p = request_problem(r, dtype);
  check_kernel_ring_problem(p, "GPU ring kernels");
  std::string why;
  if (!cu::try_driver(&why)) throw Error(ErrorKind::kNoDevice, "verify --backend gpu needs a GPU: " + why);
  if (transport == "nccl") return run_nccl(r, dtype);
  const std::vector<float> q(vec.q.begin(), vec.q.end()), k(vec.k.begin(), vec.k.end()),
      v(vec.v.begin(), vec.v.end());
  // The backward runs when there are gradients to check it against: the vectors file's, or the
  // sampled reference's for a --random problem.
  const bool backward = !vec.dout.empty() && (r.sampled || !vec.dq.empty());
  const std::vector<float> dout(vec.dout.begin(), vec.dout.end());
  gpu::GpuRingResult ring = gpu::run_gpu_ring_loopback(p, q, k, v, {}, backward ? &dout : nullptr);
  VerifyReport report;
  const auto names = [](const std::vector<StepKernelChoice>& steps) {
    StepKernelNames out;
    for (const StepKernelChoice& c : steps) out.emplace_back(c.step_type, c.kernel_uri);
    return out;
  };
  report.precision = ring_kernels_text(names(ring.step_kernels), names(ring.backward_step_kernels)) +
                     ", loopback ring of " + std::to_string(r.ranks) + " virtual ranks" + layout_note(r);
  add_half_precision_checks(r, {std::move(ring.out), std::move(ring.lse), std::move(ring.dq), std::move(ring.dk),
                                std::move(ring.dv)},
                            backward, &report);
  return report;
}

const VerifyBackendRegistrar kGpuBackend(
    {"gpu", "bf16/fp16 forward and backward rings on the GPU (--transport loopback or nccl; --dtype bf16 or fp16)",
     run_gpu});

}  // namespace
}  // namespace cpgen::cli
