// `cpgen verify --backend cpu`: the ring over N CPU threads (CPU transport) with the float32 CPU
// backend, forward and backward.
#include <vector>

#include "cpgen/error.h"
#include "runtime/backend/cpu_ring.h"
#include "tools/cli/verify_backend.h"

namespace cpgen::cli {
namespace {

constexpr double kFloat32Tolerance = 1e-5;  // docs/formats.md: float32 path

std::vector<float> to_float(const std::vector<double>& x) { return {x.begin(), x.end()}; }

VerifyReport run_cpu(const VerifyRequest& request) {
  if (!request.dtype.empty() && request.dtype != "fp32")
    throw_bad_input("--dtype " + request.dtype + " is not supported by --backend cpu; allowed: fp32");
  if (!request.transport.empty() && request.transport != "threads")
    throw_bad_input("--transport " + request.transport +
                    " is not supported by --backend cpu; allowed: threads");
  const AttentionVectors& vec = *request.vectors;
  const RingLayout layout{vec.shape, vec.seq_len, request.scheme, request.ranks};
  CpuRingResult ring = run_cpu_ring(layout, to_float(vec.q), to_float(vec.k), to_float(vec.v),
                                    to_float(vec.dout));
  VerifyReport report;
  report.precision = "float32, CPU threads";
  // The CPU ring reads whole tensors in the vectors' order; a --shape's layout is how the kernel
  // backends hand over their shards.
  if (!layout_note(request).empty())
    report.notes.push_back("layout " + request.layout + " applies to the kernel backends (emulated, gpu); the CPU ring reads bhsd");
  report.checks = {check_tensor(request, "out", kRelativeMetric, ring.out, kFloat32Tolerance),
                   check_tensor(request, "lse", kRelativeMetric, ring.lse, kFloat32Tolerance),
                   check_tensor(request, "dq", kRelativeMetric, ring.dq, kFloat32Tolerance),
                   check_tensor(request, "dk", kRelativeMetric, ring.dk, kFloat32Tolerance),
                   check_tensor(request, "dv", kRelativeMetric, ring.dv, kFloat32Tolerance)};
  report.results = VerifyResults{std::move(ring.out), std::move(ring.lse), std::move(ring.dq),
                                 std::move(ring.dk), std::move(ring.dv)};
  return report;
}

const VerifyBackendRegistrar kCpuBackend({"cpu", "float32 ring on CPU threads (forward and backward)",
                                          run_cpu});

}  // namespace
}  // namespace cpgen::cli
