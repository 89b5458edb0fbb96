#include "runtime/backend/launch_grid.h"

#include <cstdint>
#include <string>

#include "cpgen/error.h"
#include "templates/layout.cuh"

namespace cpgen::gpu {

StepGrid step_grid(const KernelSpec& spec, const RingFwdParams& params, int resident_ctas) {
  const int64_t packed_rows = static_cast<int64_t>(params.q_len) * spec.gqa_group;
  StepGrid grid;
  grid.x = static_cast<unsigned>((packed_rows + spec.block_m - 1) / spec.block_m);
  if (spec.persistent) {
    if (resident_ctas <= 0)
      throw Error(ErrorKind::kInternal, spec.uri() + ": a persistent launch needs the resident CTA count, got " +
                                            std::to_string(resident_ctas));
    const long long items = static_cast<long long>(grid.x) * params.batch * params.kv_heads;
    // The CTAs hand item indices over as int (step_fwd_wgmma.cuh, wgmma_fwd_for_each_item).
    if (items > INT32_MAX)
      throw Error(ErrorKind::kBadInput, spec.uri() + ": " + std::to_string(items) +
                                            " query blocks in one launch; a persistent launch takes at most " +
                                            std::to_string(INT32_MAX) + " (the plain launch of its tiles takes more)");
    grid.x = static_cast<unsigned>(device::persistent_ctas(items, resident_ctas));
    return grid;
  }
  // The kernel unfolds the same (y, z) back into a pair with device::unfold_pair.
  const device::FoldedPairs pairs = device::pair_grid(params.batch, params.kv_heads);
  grid.y = pairs.y;
  grid.z = pairs.z;
  return grid;
}

StepGrid step_bwd_grid(const KernelSpec& spec, const RingBwdParams& params) {
  StepGrid grid;
  grid.x = static_cast<unsigned>((static_cast<int64_t>(params.kv_len) + spec.block_n - 1) / spec.block_n);
  const device::FoldedPairs pairs = device::pair_grid(params.batch, params.kv_heads);
  grid.y = pairs.y;
  grid.z = pairs.z;
  return grid;
}

StepGrid row_grid(long long rows, int warps) {
  if (rows <= 0 || warps <= 0)
    throw Error(ErrorKind::kInternal, "row_grid: " + std::to_string(rows) + " rows in blocks of " +
                                          std::to_string(warps) + " warps");
  const long long blocks = (rows + warps - 1) / warps;
  if (blocks > 0x7fffffffLL)
    throw Error(ErrorKind::kInternal, "row_grid: " + std::to_string(rows) + " rows need " +
                                          std::to_string(blocks) + " blocks, past grid.x's 2^31 - 1");
  StepGrid grid;
  grid.x = static_cast<unsigned>(blocks);
  return grid;
}

namespace {

// Forward and backward parameters name the heads and the mask features alike.
template <typename StepParams>
void check_heads_and_masks(const KernelSpec& spec, const StepParams& params) {
  if (params.kv_heads <= 0 || params.q_heads != params.kv_heads * spec.gqa_group)
    throw Error(ErrorKind::kInternal, spec.uri() + ": launched with q_heads " + std::to_string(params.q_heads) +
                                          " and kv_heads " + std::to_string(params.kv_heads) +
                                          ", which is not GQA group " + std::to_string(spec.gqa_group));
  const bool has_intervals = params.q_key_first != nullptr && params.q_key_last != nullptr;
  if (spec.key_intervals != has_intervals || spec.softcap != (params.softcap > 0))
    throw Error(ErrorKind::kInternal, spec.uri() + ": launched " + (has_intervals ? "with" : "without") +
                                          " key intervals and softcap " + std::to_string(params.softcap) +
                                          ", which the kernel's mask features do not match");
}

}  // namespace

void check_launch_matches_spec(const KernelSpec& spec, const RingFwdParams& params) {
  check_heads_and_masks(spec, params);
}

void check_launch_matches_spec(const KernelSpec& spec, const RingBwdParams& params) {
  check_heads_and_masks(spec, params);
}

}  // namespace cpgen::gpu
