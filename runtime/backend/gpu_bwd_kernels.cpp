#include "runtime/backend/gpu_bwd_kernels.h"

#include "cpgen/error.h"
#include "runtime/backend/gpu_step_kernel.h"
#include "runtime/jit/jit.h"

namespace cpgen::gpu {
namespace {

void expect_kind(const KernelSpec& spec, KernelKind kind, const char* what) {
  if (spec.kind != kind)
    throw Error(ErrorKind::kInternal, "BackwardKernels: " + spec.uri() + " given as the " + what + " kernel");
}

}  // namespace

BackwardKernels::BackwardKernels(const BackwardSpecs& specs, const std::string& arch, int device) : arch_(arch) {
  if (specs.steps.empty()) throw Error(ErrorKind::kInternal, "BackwardKernels: no backward step spec given");
  for (const auto& [step, spec] : specs.steps) {
    if (!is_backward(step))
      throw Error(ErrorKind::kInternal, "BackwardKernels: step type " + std::string(step_type_name(step)) +
                                            " is not a backward step type");
    expect_kind(spec, KernelKind::kBackwardStep, "backward step");
    by_step_.emplace_back(step, add(spec, device));
  }
  expect_kind(specs.pre, KernelKind::kBackwardPre, "preprocessing");
  expect_kind(specs.convert, KernelKind::kBackwardConvert, "conversion");
  pre_ = add(specs.pre, device);
  convert_ = add(specs.convert, device);
}

size_t BackwardKernels::add(const KernelSpec& spec, int device) {
  for (size_t i = 0; i < loaded_.size(); ++i)
    if (loaded_[i].spec == spec) return i;
  const Feasibility f = check_feasibility(spec, arch_);
  if (!f.feasible) throw Error(ErrorKind::kInfeasible, spec.uri() + " on " + arch_ + ": " + f.reason);
  Loaded k;
  k.spec = spec;
  k.shared_bytes = f.shared_bytes;
  k.kernel = &load_kernel(compile_kernel(spec, arch_), device);
  k.kernel->reserve_dynamic_shared(k.shared_bytes);
  loaded_.push_back(k);
  return loaded_.size() - 1;
}

size_t BackwardKernels::index_of(StepType step) const {
  for (const auto& [type, index] : by_step_)
    if (type == step) return index;
  return by_step_.front().second;  // the main spec, as StepKernel does for unlisted types
}

LaunchShape BackwardKernels::shape_of(const Loaded& k, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                      CUstream stream) const {
  LaunchShape shape;
  shape.grid[0] = grid_x;
  shape.grid[1] = grid_y;
  shape.grid[2] = grid_z;
  shape.block[0] = static_cast<unsigned>(k.spec.threads());
  shape.dynamic_shared_bytes = k.shared_bytes;
  shape.stream = stream;
  return shape;
}

void BackwardKernels::launch_pre(const RingBwdPreParams& params, CUstream stream) const {
  const Loaded& k = loaded_[pre_];
  const StepGrid grid = row_grid(static_cast<long long>(params.batch) * params.q_heads * params.q_len, k.spec.warps);
  k.kernel->launch(params, shape_of(k, grid.x, grid.y, grid.z, stream));
}

void BackwardKernels::launch(const RingBwdParams& params, StepType step, CUstream stream) const {
  const Loaded& k = loaded_[index_of(step)];
  check_launch_matches_spec(k.spec, params);
  const StepGrid grid = step_bwd_grid(k.spec, params);
  k.kernel->launch(params, shape_of(k, grid.x, grid.y, grid.z, stream));
}

void BackwardKernels::launch_convert(const RingBwdConvertParams& params, CUstream stream) const {
  const Loaded& k = loaded_[convert_];
  const StepGrid grid = row_grid(static_cast<long long>(params.batch) * params.heads * params.len, k.spec.warps);
  k.kernel->launch(params, shape_of(k, grid.x, grid.y, grid.z, stream));
}

}  // namespace cpgen::gpu
