#include "runtime/gpu_step_kernel.h"

#include "cpgen/error.h"
#include "runtime/jit.h"

namespace cpgen::gpu {

StepGrid step_grid(const KernelSpec& spec, const RingFwdParams& params) {
  const int64_t packed_rows = static_cast<int64_t>(params.q_len) * spec.gqa_group;
  StepGrid grid;
  grid.x = static_cast<unsigned>((packed_rows + spec.block_m - 1) / spec.block_m);
  grid.y = static_cast<unsigned>(params.batch) * static_cast<unsigned>(params.kv_heads);
  return grid;
}

StepKernel::StepKernel(const KernelSpec& spec, const std::string& arch, int device)
    : spec_(spec), arch_(arch) {
  Feasibility f = check_feasibility(spec, arch);
  if (!f.feasible) throw Error(ErrorKind::kInfeasible, spec.uri() + " on " + arch + ": " + f.reason);
  shared_bytes_ = f.shared_bytes;
  kernel_ = &load_kernel(compile_kernel(spec, arch), device);
  kernel_->reserve_dynamic_shared(shared_bytes_);
}

void StepKernel::launch(const RingFwdParams& params, CUstream stream) const {
  if (params.kv_heads <= 0 || params.q_heads != params.kv_heads * spec_.gqa_group)
    throw Error(ErrorKind::kInternal, spec_.uri() + ": launched with q_heads " +
                                          std::to_string(params.q_heads) + " and kv_heads " +
                                          std::to_string(params.kv_heads) + ", which is not GQA group " +
                                          std::to_string(spec_.gqa_group));
  const StepGrid grid = step_grid(spec_, params);
  LaunchShape shape;
  shape.grid[0] = grid.x;
  shape.grid[1] = grid.y;
  shape.grid[2] = grid.z;
  shape.block[0] = static_cast<unsigned>(spec_.threads());
  shape.dynamic_shared_bytes = shared_bytes_;
  shape.stream = stream;
  kernel_->launch(params, shape);
}

}  // namespace cpgen::gpu
