// `cpgen verify --backend cpu`: the ring over N CPU threads with the float32 CPU backend.
#include <vector>

#include "runtime/cpu_ring.h"
#include "tools/cli/verify_backend.h"

namespace cpgen::cli {
namespace {

std::vector<float> to_float(const std::vector<double>& x) { return {x.begin(), x.end()}; }

const VerifyBackendRegistrar kCpuBackend({
    "cpu",
    "float32 (CPU threads)",
    1e-5,  // shared/vectors/README.md: float32 path
    [](const AttentionVectors& vec, Scheme scheme, int ranks) {
      const RingLayout layout{vec.shape, vec.seq_len, scheme, ranks};
      CpuRingResult ring = run_cpu_ring(layout, to_float(vec.q), to_float(vec.k),
                                        to_float(vec.v), to_float(vec.dout));
      return VerifyResults{std::move(ring.out), std::move(ring.lse), std::move(ring.dq),
                           std::move(ring.dk), std::move(ring.dv)};
    },
});

}  // namespace
}  // namespace cpgen::cli
