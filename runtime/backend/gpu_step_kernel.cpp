#include "runtime/backend/gpu_step_kernel.h"

#include "cpgen/error.h"
#include "runtime/backend/wgmma_params.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/tensor_map.h"
#include "runtime/jit/jit.h"
#include "templates/layout.cuh"

namespace cpgen::gpu {

void launch_forward_kernel(const KernelSpec& spec, const LoadedKernel& kernel, int shared_bytes,
                           const RingFwdParams& params, CUstream stream, unsigned* work_counter, int sm_margin) {
  const StepGrid grid =
      step_grid(spec, params, spec.persistent ? kernel.resident_ctas(spec.threads(), shared_bytes, sm_margin) : 0);
  LaunchShape shape;
  shape.grid[0] = grid.x;
  shape.grid[1] = grid.y;
  shape.grid[2] = grid.z;
  shape.block[0] = static_cast<unsigned>(spec.threads());
  shape.dynamic_shared_bytes = shared_bytes;
  shape.stream = stream;
  if (spec.kind != KernelKind::kForwardWgmma) {
    kernel.launch(params, shape);
    return;
  }
  // wgmma_params names the URI in its own errors; the driver's launch error gets it here.
  const RingFwdWgmmaParams wgmma = wgmma_params(spec, params, &cu::encode_driver_tma_map, kernel.l2_cache_bytes());
  if (spec.persistent && work_counter == nullptr)
    throw Error(ErrorKind::kInternal, spec.uri() + ": a persistent launch needs its work counter");
  try {
    if (spec.persistent) {
      // Zero before the launch on the same stream, after the stream's previous launch used it.
      CPGEN_CU_CHECK(
          cu::driver().cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(work_counter), 0, 1, stream));
      kernel.launch_struct(&wgmma, work_counter, shape);
    } else {
      kernel.launch_struct(&wgmma, shape);
    }
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kCuda) throw;
    throw Error(ErrorKind::kCuda, "launch of " + spec.uri() + " (grid " + std::to_string(grid.x) + "x" +
                                      std::to_string(grid.y) + "x" + std::to_string(grid.z) + ", " +
                                      std::to_string(spec.threads()) + " threads, " + std::to_string(shared_bytes) +
                                      " bytes of shared memory): " + e.what());
  }
}

StepKernel::StepKernel(const KernelSpec& spec, const std::string& arch, int device) : arch_(arch) {
  add(spec, device);
}

StepKernel::StepKernel(const std::vector<std::pair<StepType, KernelSpec>>& per_step, const std::string& arch,
                       int device, int sm_margin)
    : arch_(arch), sm_margin_(sm_margin) {
  if (per_step.empty()) throw Error(ErrorKind::kInternal, "StepKernel: no spec given");
  for (const auto& [step, spec] : per_step) by_step_.at(static_cast<size_t>(step)) = add(spec, device);
}

size_t StepKernel::add(const KernelSpec& spec, int device) {
  for (size_t i = 0; i < loaded_.size(); ++i)
    if (loaded_[i].spec == spec) return i;
  Feasibility f = check_feasibility(spec, arch_);
  if (!f.feasible) throw Error(ErrorKind::kInfeasible, spec.uri() + " on " + arch_ + ": " + f.reason);
  Loaded k;
  k.spec = spec;
  k.shared_bytes = f.shared_bytes;
  k.kernel = &load_kernel(compile_kernel(spec, arch_), device);
  k.kernel->reserve_dynamic_shared(k.shared_bytes);
  loaded_.push_back(k);
  return loaded_.size() - 1;
}

void StepKernel::launch(const RingFwdParams& params, CUstream stream, unsigned* work_counter) const {
  launch_loaded(loaded_.front(), params, stream, work_counter);
}

void StepKernel::launch(const RingFwdParams& params, StepType step, CUstream stream, unsigned* work_counter) const {
  launch_loaded(loaded_[index_of(step)], params, stream, work_counter);
}

void StepKernel::launch_loaded(const Loaded& k, const RingFwdParams& params, CUstream stream,
                               unsigned* work_counter) const {
  check_launch_matches_spec(k.spec, params);
  launch_forward_kernel(k.spec, *k.kernel, k.shared_bytes, params, stream, work_counter, sm_margin_);
}

}  // namespace cpgen::gpu
