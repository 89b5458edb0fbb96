// The sm_90a forward family (templates/step_fwd_wgmma.cuh) inside KernelSpec: its URI, parser,
// validation and feasibility model, kept apart from the mma.sync family's code paths.
//
//   ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2
//   ring_fwd_wgmma_bf16_hd128_causal_ivl_cap_gqa1_bm128_bn128_c2_s2   (mask features)
//   ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2_pingpong   (KernelSpec::pingpong)
//   ring_fwd_wgmma_bf16_hd128_causal_gqa1_bm128_bn128_c2_s2_persistent (KernelSpec::persistent)
//
// The mask tokens _ivl (key intervals) and _cap (softcap) mean what they mean in the mma.sync
// family (KernelSpec::key_intervals, softcap) and follow causal/full in the same order.
// _pingpong names the schedule in which the two consumer warpgroups take turns issuing their MMAs
// (two consumers only); _persistent, last, the launch of about one CTA per SM, each looping over
// query blocks (either schedule). c is the number of consumer warpgroups (each owns 64 query
// rows, so block_m = 64 c); the CTA adds one producer warpgroup, so KernelSpec::warps holds
// 4 (1 + c) and threads() is right.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "generator/kernel_spec.h"

namespace cpgen {

// Whole swizzled column blocks: 128-byte lines of 64 elements, or at head dim 96 three 64-byte
// lines of 32 (templates/params_wgmma.cuh, wgmma_swizzle_bytes).
inline constexpr int kSupportedWgmmaHeadDims[] = {64, 96, 128, 256};
inline constexpr int kSupportedWgmmaGqaGroups[] = {1, 2, 4, 8, 16};
// Keys per tile, the N of S = Q K^T: 176 (head dims up to 128) is FlashAttention-3's tile for
// unmasked head dim 128, 80 its tile for head dim 256.
inline constexpr int kSupportedWgmmaBlockN[] = {64, 80, 128, 176};
// Consumer warpgroups: three (192 query rows, 160 registers each) is FlashAttention-3's split at
// head dim 64, where the softmax weighs most against the MMAs.
inline constexpr int kSupportedWgmmaConsumers[] = {1, 2, 3};
// At least two: a consumer issues the S of tile t + 1 (waiting for its stage to fill) before it
// releases the stage of tile t, so one stage would wait on itself.
inline constexpr int kSupportedWgmmaStages[] = {2, 3, 4};
// The only target with wgmma, TMA and setmaxnreg.
inline constexpr std::string_view kWgmmaArch = "sm_90a";

int wgmma_consumers(const KernelSpec& spec);  // warps / 4 - 1
std::string wgmma_uri(const KernelSpec& spec);
// Parses a URI whose second and third fields are "fwd" and "wgmma"; throws kBadInput otherwise.
KernelSpec parse_wgmma_uri(std::string_view uri);
void validate_wgmma(const KernelSpec& spec, std::string_view where);
Feasibility check_wgmma_feasibility(const KernelSpec& spec, std::string_view arch);
// Whether `uri` names the wgmma family (so KernelSpec::parse hands it to parse_wgmma_uri).
bool is_wgmma_uri(std::string_view uri);

// The default tile config of a (dtype, head dim, causal, group) combination: 128 query rows over
// two consumer warpgroups, 128-key tiles (64 at head dim 256), two stages.
KernelSpec wgmma_default_for(Dtype dtype, int head_dim, bool causal, int gqa_group);
// Every supported combination's default.
std::vector<KernelSpec> wgmma_defaults();

// Where the wgmma family is the documented forward default on sm_90a: the combinations a GPU has
// run correctly and timed faster than the mma.sync default in one run. Both mask kinds (causal
// and full) of each: the two kernels differ only in which tiles they mask. A combination joins
// this table when a device session has timed it. Each row: the mma.sync default's time over the
// wgmma default's, on an H200 (132 SMs):
//   bf16 hd128 GQA 1  1.61-1.69x, causal and full, 8K and 16K (2026-11-27 gpu-check); 1.69x full
//                     9600 (2026-11-28 tune)
//   fp16 hd128 GQA 1  1.64-1.76x, causal and full, 8K and 16K (2026-11-28 gpu-check, wgmma phase)
//   bf16 hd128 GQA 4  1.62-1.70x causal, the three zigzag step types at 8K-32K (2026-11-28 tune)
//   bf16 hd128 GQA 8  1.51-1.78x causal, the three zigzag step types at 4K-8K (2026-11-28 tune)
//   fp16 hd64  GQA 1  1.48x full 8K (2026-11-28 tune; 1.36x the fastest mma.sync tile)
//   fp16 hd256 GQA 8  2.43-3.10x causal, the three zigzag step types at 4K-8K (2026-11-28 tune)
// The tune rows are the forward tune of examples/shapes (bench/results/2026-11-28-NVIDIA-H200-
// gpu-check.md; every record in bench/results/2026-11-28-h200-tune-examples.json).
struct WgmmaDefaultShape {
  Dtype dtype;
  int head_dim;
  int gqa_group;
};
inline constexpr WgmmaDefaultShape kWgmmaDefaultShapes[] = {
    {Dtype::kBf16, 128, 1}, {Dtype::kFp16, 128, 1}, {Dtype::kBf16, 128, 4},
    {Dtype::kBf16, 128, 8}, {Dtype::kFp16, 64, 1},  {Dtype::kFp16, 256, 8},
};
bool wgmma_is_default(Dtype dtype, int head_dim, int gqa_group, std::string_view arch);
// The documented forward default on `arch`: the wgmma family's default tiles where
// wgmma_is_default says so, else KernelSpec::default_for_arch (the mma.sync family, fitted to the
// arch's shared memory). The lookup's last resort (cache/lookup.h) and the sm_90a entries of the
// shipped default-heuristic cache.
KernelSpec forward_default_for_arch(Dtype dtype, int head_dim, bool causal, int gqa_group, std::string_view arch);

}  // namespace cpgen
