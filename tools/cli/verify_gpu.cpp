#include "tools/cli/verify_gpu.h"

#include <cmath>

#include "cpgen/error.h"
#include "runtime/cuda_driver.h"
#include "runtime/gpu_ring_run.h"
#include "cpgen/nccl_bootstrap.h"
#include "tools/cli/nccl_launch.h"

namespace cpgen::cli {

namespace {

// One process per rank (nccl_launch.h); each compares its shard, the sums combine here.
GpuVerifyOutcome verify_nccl(const std::string& path, int ranks, Scheme scheme, Dtype dtype) {
  if (!nccl_available())
    throw Error(ErrorKind::kNccl, "cpgen verify --transport nccl: cpgen was built without NCCL");
  const std::vector<nlohmann::json> results = launch_nccl_ranks(
      ranks,
      {"--task", "verify", "--vectors", path, "--scheme", std::string(scheme_name(scheme)),
       "--dtype", std::string(dtype_name(dtype))},
      600);
  double sq_diff = 0, sq_ref = 0, lse_max = 0;
  for (const auto& j : results) {
    const double d = j["sq_diff"].get<double>(), l = j["lse_max"].get<double>();
    sq_diff = d < 0 || std::isnan(sq_diff) ? NAN : sq_diff + d;
    sq_ref += j["sq_ref"].get<double>();
    lse_max = l < 0 || std::isnan(lse_max) ? NAN : std::max(lse_max, l);
  }
  GpuVerifyOutcome o;
  o.kernel_uri = "(per rank)";
  o.out_rel_error = sq_ref > 0 ? std::sqrt(sq_diff / sq_ref) : std::sqrt(sq_diff);
  o.lse_max_abs_error = lse_max;
  o.passed = o.out_rel_error <= 2e-2 && o.lse_max_abs_error <= 2e-2;
  return o;
}

}  // namespace

GpuVerifyOutcome verify_gpu(const std::string& vectors_path, const AttentionVectors& vec, int ranks, Scheme scheme, Dtype dtype,
                            const std::string& transport) {
  if (transport != "loopback" && transport != "nccl")
    throw_bad_input("--transport " + transport + " is not supported; allowed: loopback, nccl");
  if (vec.shape.window > 0)
    throw_bad_input(vec.name + ": sliding windows (window " + std::to_string(vec.shape.window) +
                    ") are not supported by the GPU ring kernel");
  std::string why;
  if (!cu::try_driver(&why))
    throw Error(ErrorKind::kNoDevice, "cpgen verify --backend gpu needs a GPU: " + why);
  if (transport == "nccl") return verify_nccl(vectors_path, ranks, scheme, dtype);
  Problem p;
  p.name = vec.name;
  p.batch = vec.shape.batch;
  p.q_heads = vec.shape.q_heads;
  p.kv_heads = vec.shape.kv_heads;
  p.head_dim = vec.shape.head_dim;
  p.seq_len = vec.seq_len;
  p.causal = vec.shape.causal;
  p.softmax_scale = vec.shape.scale;
  p.cp_size = ranks;
  p.scheme = scheme;
  p.dtype = dtype;
  const std::vector<float> q(vec.q.begin(), vec.q.end()), k(vec.k.begin(), vec.k.end()),
      v(vec.v.begin(), vec.v.end());
  gpu::GpuRingResult r = gpu::run_gpu_ring_loopback(p, q, k, v);
  GpuVerifyOutcome o;
  o.kernel_uri = r.kernel_uri;
  o.out_rel_error = relative_error(r.out, vec.out);
  for (size_t i = 0; i < r.lse.size(); ++i) {
    const double err = std::isinf(vec.lse[i]) && r.lse[i] == vec.lse[i] ? 0 : std::abs(r.lse[i] - vec.lse[i]);
    if (!(err <= o.lse_max_abs_error)) o.lse_max_abs_error = err;  // NaN sticks
  }
  o.passed = o.out_rel_error <= 2e-2 && o.lse_max_abs_error <= 2e-2;
  return o;
}

}  // namespace cpgen::cli
