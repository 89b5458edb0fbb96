// KernelSpec: every parameter a ring-step kernel is specialized on, its canonical name (URI),
// the exact inverse parser, validation with clear errors, and the feasibility model that rejects
// configs which cannot fit the target before anything is compiled.
//
// Four kinds share the struct:
//   forward step      ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2
//                     ring_fwd_bf16_hd128_causal_ivl_cap_gqa4_bm128_bn64_w4_s2 (mask features)
//   backward pre      ring_bwd_pre_bf16_hd128_w4   (delta = rowsum(dO * O), zeroes the fp32 dQ)
//   backward step     ring_bwd_bf16_hd128_causal_gqa4_bm64_bn64_w8_s2   (dQ, dK, dV of one step)
//   backward convert  ring_bwd_cvt_bf16_hd128_w4   (an fp32 dQ, dK or dV into the input dtype)
// A field a kind does not use holds a fixed canonical value (backward pre and convert: causal
// false, gqa_group 1, block_m = warps, block_n 0, stages 0), so that parse(uri()) == spec holds
// for every kind.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cpgen/types.h"

namespace cpgen {

// kForwardWgmma: the sm_90a forward family (generator/kernel_spec_wgmma.h), same contract as
// kForwardStep with its own URI and tile parameters.
enum class KernelKind { kForwardStep, kBackwardPre, kBackwardStep, kBackwardConvert, kForwardWgmma };

// Whether a kernel of this kind runs a ring step of that direction: a forward step runs either
// forward family (mma.sync, and wgmma on sm_90a), a backward step the backward step kernel; the
// backward's pre and convert kernels run no step.
inline bool runs_step(KernelKind kind, bool backward_step) {
  return backward_step ? kind == KernelKind::kBackwardStep
                       : kind == KernelKind::kForwardStep || kind == KernelKind::kForwardWgmma;
}

// Supported values, as data. The generator, the parser, the tuner and the tests all read these.
inline constexpr int kSupportedHeadDims[] = {64, 96, 128, 256};
inline constexpr int kSupportedGqaGroups[] = {1, 2, 4, 8, 16};
inline constexpr int kSupportedBlockM[] = {32, 64, 128, 256};
inline constexpr int kSupportedBlockN[] = {32, 64, 128, 256};
inline constexpr int kSupportedWarps[] = {1, 2, 4, 8, 16};
inline constexpr int kSupportedStages[] = {1, 2, 3, 4};
inline constexpr Dtype kSupportedDtypes[] = {Dtype::kBf16, Dtype::kFp16};
// Targets of the mma.sync kernel: every GPU that has mma.sync m16n8k16 and cp.async (Ampere and
// later); sm_90a is Hopper's arch-specific target (wgmma, setmaxnreg) for later kernels.
inline constexpr std::string_view kSupportedArchs[] = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120"};
// Backward step tiles: block_m packed query rows per inner iteration, block_n keys per CTA (the
// KV-outer loop); stages is the depth of the Q/dO tile pipeline.
inline constexpr int kSupportedBwdBlockM[] = {16, 32, 64, 128};
inline constexpr int kSupportedBwdBlockN[] = {16, 32, 64, 128};
inline constexpr int kSupportedBwdStages[] = {1, 2};

struct KernelSpec {
  KernelKind kind = KernelKind::kForwardStep;
  Dtype dtype = Dtype::kBf16;
  int head_dim = 128;
  bool causal = true;
  // The mask model's features (runtime/core/attention_shape.h), forward and backward steps only.
  // key_intervals: the kernel reads each local query's visible key interval [q_key_first,
  // q_key_last] (global positions, params.cuh), which expresses causal, sliding windows and packed
  // documents alike, and skips tiles and blocks by it ("_ivl" in the URI). softcap: logits are
  // c * tanh(scale * q.k / c) with c = params.softcap ("_cap").
  bool key_intervals = false;
  bool softcap = false;
  int gqa_group = 1;   // query heads per kv head served by one CTA
  int block_m = 128;   // rows of the packed (position, group head) query tile per CTA
  int block_n = 64;    // keys per K/V tile
  int warps = 4;
  int stages = 2;      // cp.async pipeline depth for K/V tiles (backward: Q/dO tiles)
  // The wgmma family with two consumer warpgroups only (generator/kernel_spec_wgmma.h): the two
  // take turns issuing their MMAs, so one's softmax runs while the other's MMAs do ("_pingpong").
  // false for every other kind.
  bool pingpong = false;
  // The wgmma family only: about one CTA per SM, each looping over query blocks, so that one
  // block's Q and first tiles load while the last one finishes ("_persistent", after _pingpong).
  bool persistent = false;

  // e.g. ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2 (non-causal: "full"; mask features
  // add "_ivl" and "_cap" after the causal/full token)
  std::string uri() const;
  // Exact inverse of uri(); throws Error(kBadInput) naming the bad field and the allowed values.
  static KernelSpec parse(std::string_view uri);
  // Throws Error(kBadInput) when a field holds an unsupported value.
  void validate() const;

  // The documented default tile config for a (dtype, head dim, causal, group) combination.
  static KernelSpec default_for(Dtype dtype, int head_dim, bool causal, int gqa_group);
  // The default where it fits `arch`; otherwise (head dim 256 on the 99 KB targets sm_86, sm_89,
  // sm_120) block_n halved, keeping two stages, until the tiles fit, then one stage.
  static KernelSpec default_for_arch(Dtype dtype, int head_dim, bool causal, int gqa_group, std::string_view arch);
  // Every supported (dtype, head dim, causal, group) combination with its default config.
  static std::vector<KernelSpec> all_defaults();
  // The tile configs worth trying for one combination (the tuner prunes them further).
  static std::vector<KernelSpec> candidates_for(Dtype dtype, int head_dim, bool causal, int gqa_group);

  // Backward kinds. all_defaults() and candidates_for() above stay forward-only; these are their
  // backward counterparts (the compile matrix and `cpgen compile --all` read both).
  static KernelSpec backward_pre(Dtype dtype, int head_dim, int warps = 4);
  static KernelSpec backward_convert(Dtype dtype, int head_dim, int warps = 4);
  static KernelSpec backward_default_for(Dtype dtype, int head_dim, bool causal, int gqa_group);
  // The backward default where it fits `arch`; otherwise (the 99 KB targets sm_86, sm_89, sm_120)
  // one Q/dO stage, then smaller query tiles, until it fits.
  static KernelSpec backward_default_for_arch(Dtype dtype, int head_dim, bool causal, int gqa_group,
                                              std::string_view arch);
  // Every supported combination's default backward step, then one pre and one convert kernel per
  // (dtype, head dim).
  static std::vector<KernelSpec> backward_defaults();
  static std::vector<KernelSpec> backward_candidates_for(Dtype dtype, int head_dim, bool causal,
                                                         int gqa_group);

  int threads() const { return warps * 32; }
  bool is_backward() const { return kind != KernelKind::kForwardStep && kind != KernelKind::kForwardWgmma; }
  bool operator==(const KernelSpec&) const = default;
};

// What the feasibility model predicts for a spec on an arch.
struct Feasibility {
  bool feasible = false;
  std::string reason;          // empty when feasible; otherwise one line saying what does not fit
  int shared_bytes = 0;        // dynamic shared memory the kernel asks for
  int shared_limit = 0;        // the arch's per-block opt-in limit
  int register_estimate = 0;   // per thread
};

// The model evaluates the templates' own layouts (fwd_layout, bwd_layout, wgmma_fwd_layout in
// templates/traits*.cuh): the same byte counts, budgets and divisibility rules, checked before
// compiling so the tuner never spends NVRTC time on a spec that cannot compile.
Feasibility check_feasibility(const KernelSpec& spec, std::string_view arch);
int shared_memory_limit(std::string_view arch);  // throws kBadInput for an unsupported arch
void validate_arch(std::string_view arch);
// kSupportedArchs as "sm_80, sm_86, ..., sm_120", for messages and help texts.
std::string supported_archs_text();

}  // namespace cpgen
