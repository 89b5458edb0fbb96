// Launch grids of the generated kernels, as the templates enumerate their blocks. Free of CUDA
// headers: the GPU launches (gpu_step_kernel.h) and the emulated ones (emulated_device.h) both
// take their grids from here, so the emulator runs the blocks the GPU would. (The namespace is the
// GPU's because the grid is the GPU launch contract; the emulator reproduces it.)
#pragma once

#include "generator/kernel_spec.h"
#include "templates/params.cuh"
#include "templates/params_bwd.cuh"

namespace cpgen::gpu {

// Grid of a forward step launch (templates/step_fwd.cuh): x enumerates blocks of block_m packed
// query rows (q_len * G rows per kv head with GQA group G), y and z the (batch, kv head) pairs:
// y the kv head and z the batch entry, or where either passes 65535 the pairs folded by
// device::fold_pairs (device::pair_grid, templates/layout.cuh). A persistent spec
// (KernelSpec::persistent) gets x = device::persistent_ctas(blocks x pairs, resident_ctas) and
// y = z = 1: its CTAs loop over the query blocks (templates/step_fwd_wgmma.cuh). resident_ctas is
// what the device keeps resident at once (one CTA per SM for the wgmma family); it is read only
// for a persistent spec, which throws kInternal without one.
struct StepGrid {
  unsigned x = 1, y = 1, z = 1;
};
StepGrid step_grid(const KernelSpec& spec, const RingFwdParams& params, int resident_ctas = 0);
// Grid of a backward step launch (templates/step_bwd.cuh, KV-outer): x enumerates blocks of
// block_n keys of the held chunk, y and z the (batch, kv head) pairs folded as above.
StepGrid step_bwd_grid(const KernelSpec& spec, const RingBwdParams& params);
// Grid of the one-warp-per-row backward kernels (templates/step_bwd_pre.cuh: the preprocessing
// over batch * q_heads * q_len rows, the conversion over batch * heads * len rows): x alone, rows
// in blocks of `warps`. Throws kInternal past grid.x's limit of 2^31 - 1 blocks.
StepGrid row_grid(long long rows, int warps);

// A step launch's heads and mask tables against what its kernel was generated for, checked by
// the GPU and the emulated launches alike: a GQA group other than the kernel's packs rows under
// the wrong kv head; a kernel without the mask features (KernelSpec key_intervals, softcap) would
// silently ignore the tables or the cap, one with them would read null tables. Throws kInternal.
void check_launch_matches_spec(const KernelSpec& spec, const RingFwdParams& params);
void check_launch_matches_spec(const KernelSpec& spec, const RingBwdParams& params);

}  // namespace cpgen::gpu
