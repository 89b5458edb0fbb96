#include "generator/kernel_spec.h"

#include <algorithm>
#include <charconv>
#include <span>

#include "cpgen/error.h"
#include "cpgen/traits.cuh"
#include "cpgen/traits_bwd.cuh"
#include "generator/kernel_spec_wgmma.h"

namespace cpgen {
namespace {

template <typename T>
bool contains(std::span<const T> values, T value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

std::string join(std::span<const int> values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

void check_field(std::string_view field, int value, std::span<const int> allowed,
                 std::string_view where) {
  if (contains(allowed, value)) return;
  std::string msg = std::string(field) + " " + std::to_string(value) + " is not supported";
  if (!where.empty()) msg += " in '" + std::string(where) + "'";
  throw_bad_input(msg + "; allowed: " + join(allowed));
}

void where_suffix(std::string& msg, std::string_view where) {
  if (!where.empty()) msg += " in '" + std::string(where) + "'";
}

// The backward pre and convert kernels: one warp per row, specialized on dtype, head dim, warps.
void validate_backward_rows(const KernelSpec& s, std::string_view where) {
  check_field("head_dim", s.head_dim, kSupportedHeadDims, where);
  check_field("warps", s.warps, kSupportedWarps, where);
  if (s.causal || s.key_intervals || s.softcap || s.gqa_group != 1 || s.block_m != s.warps ||
      s.block_n != 0 || s.stages != 0) {
    std::string msg = std::string("a backward ") + (s.kind == KernelKind::kBackwardPre ? "pre" : "convert") +
                      " kernel takes only dtype, head_dim and warps";
    where_suffix(msg, where);
    throw_bad_input(msg + "; causal, key_intervals and softcap must be false, gqa_group 1, block_m = warps, "
                          "block_n 0, stages 0");
  }
}

void validate_backward_step(const KernelSpec& s, std::string_view where) {
  check_field("head_dim", s.head_dim, kSupportedHeadDims, where);
  check_field("gqa_group", s.gqa_group, kSupportedGqaGroups, where);
  check_field("block_m", s.block_m, kSupportedBwdBlockM, where);
  check_field("block_n", s.block_n, kSupportedBwdBlockN, where);
  check_field("warps", s.warps, kSupportedWarps, where);
  check_field("stages", s.stages, kSupportedBwdStages, where);
}

void validate_fields(const KernelSpec& s, std::string_view where) {
  if (s.kind == KernelKind::kForwardWgmma) return validate_wgmma(s, where);
  if (s.pingpong) {
    std::string msg = "pingpong is a scheduling of the wgmma family's two consumer warpgroups";
    where_suffix(msg, where);
    throw_bad_input(msg + "; it must be false for this kernel kind");
  }
  if (s.persistent) {
    std::string msg = "persistent is a launch form of the wgmma family";
    where_suffix(msg, where);
    throw_bad_input(msg + "; it must be false for this kernel kind");
  }
  if (s.kind == KernelKind::kBackwardPre || s.kind == KernelKind::kBackwardConvert)
    return validate_backward_rows(s, where);
  if (s.kind == KernelKind::kBackwardStep) return validate_backward_step(s, where);
  check_field("head_dim", s.head_dim, kSupportedHeadDims, where);
  check_field("gqa_group", s.gqa_group, kSupportedGqaGroups, where);
  check_field("block_m", s.block_m, kSupportedBlockM, where);
  check_field("block_n", s.block_n, kSupportedBlockN, where);
  check_field("warps", s.warps, kSupportedWarps, where);
  check_field("stages", s.stages, kSupportedStages, where);
  // Each warp owns whole 16-row MMA tiles of the query block.
  if (s.block_m % (16 * s.warps) != 0) {
    std::string msg = "block_m " + std::to_string(s.block_m) + " is not a multiple of 16 * warps (" +
                      std::to_string(16 * s.warps) + ")";
    if (!where.empty()) msg += " in '" + std::string(where) + "'";
    throw_bad_input(msg + "; each warp computes whole 16-row MMA tiles");
  }
}

// Splits "ring_fwd_bf16_hd128_causal_gqa4_bm128_bn64_w4_s2" at '_'.
std::vector<std::string_view> split(std::string_view text) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find('_', start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

// Reads "<prefix><decimal>" exactly: no sign, no leading zeros, no trailing characters.
int parse_prefixed(std::string_view part, std::string_view prefix, std::string_view field,
                   std::string_view uri) {
  auto fail = [&]() -> int {
    throw_bad_input("field " + std::string(field) + " in '" + std::string(uri) + "' must read '" +
                    std::string(prefix) + "<number>', got '" + std::string(part) + "'");
  };
  if (part.size() <= prefix.size() || part.substr(0, prefix.size()) != prefix) return fail();
  std::string_view digits = part.substr(prefix.size());
  if (digits.size() > 1 && digits[0] == '0') return fail();
  int value = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return fail();
  return value;
}

}  // namespace

std::string KernelSpec::uri() const {
  if (kind == KernelKind::kForwardWgmma) return wgmma_uri(*this);
  if (kind == KernelKind::kBackwardPre || kind == KernelKind::kBackwardConvert) {
    return std::string(kind == KernelKind::kBackwardPre ? "ring_bwd_pre_" : "ring_bwd_cvt_") +
           std::string(dtype_name(dtype)) + "_hd" + std::to_string(head_dim) +
           "_w" + std::to_string(warps);
  }
  std::string out = kind == KernelKind::kBackwardStep ? "ring_bwd_" : "ring_fwd_";
  out += dtype_name(dtype);
  out += "_hd" + std::to_string(head_dim);
  out += causal ? "_causal" : "_full";
  if (key_intervals) out += "_ivl";
  if (softcap) out += "_cap";
  out += "_gqa" + std::to_string(gqa_group);
  out += "_bm" + std::to_string(block_m) + "_bn" + std::to_string(block_n);
  out += "_w" + std::to_string(warps) + "_s" + std::to_string(stages);
  return out;
}

namespace {

Dtype parse_dtype(std::string_view part, const std::string& uri) {
  if (part == "bf16") return Dtype::kBf16;
  if (part == "fp16") return Dtype::kFp16;
  throw_bad_input("dtype '" + std::string(part) + "' in '" + uri + "' is not supported; allowed: bf16, fp16");
}

}  // namespace

KernelSpec KernelSpec::parse(std::string_view uri) {
  if (is_wgmma_uri(uri)) return parse_wgmma_uri(uri);
  const std::string u(uri);
  auto parts = split(uri);
  constexpr const char* kExpected =
      "; expected ring_<fwd|bwd>_<bf16|fp16>_hd<N>_<causal|full>[_ivl][_cap]_gqa<N>_bm<N>_bn<N>_w<N>_s<N>, "
      "ring_fwd_wgmma_<bf16|fp16>_hd<N>_<causal|full>[_ivl][_cap]_gqa<N>_bm<N>_bn<N>_c<N>_s<N>[_pingpong][_persistent] "
      "or ring_bwd_<pre|cvt>_<bf16|fp16>_hd<N>_w<N>";
  if (parts.size() < 2 || parts[0] != "ring") throw_bad_input("kernel URI '" + u + "' is malformed" + kExpected);
  KernelSpec s;
  if (parts[1] == "bwd" && parts.size() >= 3 && (parts[2] == "pre" || parts[2] == "cvt")) {
    if (parts.size() != 6) throw_bad_input("kernel URI '" + u + "' is malformed" + kExpected);
    s.kind = parts[2] == "pre" ? KernelKind::kBackwardPre : KernelKind::kBackwardConvert;
    s.dtype = parse_dtype(parts[3], u);
    s.head_dim = parse_prefixed(parts[4], "hd", "head_dim", uri);
    s.warps = parse_prefixed(parts[5], "w", "warps", uri);
    s.causal = false;
    s.gqa_group = 1;
    s.block_m = s.warps;
    s.block_n = 0;
    s.stages = 0;
    validate_fields(s, uri);
    return s;
  }
  // The optional mask tokens follow causal/full, in this order: _ivl (per-query key intervals),
  // _cap (logit softcap). Taking them out leaves the ten fixed fields.
  size_t next = 5;
  if (parts.size() > next && parts[next] == "ivl") {
    s.key_intervals = true;
    parts.erase(parts.begin() + next);
  }
  if (parts.size() > next && parts[next] == "cap") {
    s.softcap = true;
    parts.erase(parts.begin() + next);
  }
  if (parts.size() != 10) throw_bad_input("kernel URI '" + u + "' is malformed" + kExpected);
  if (parts[1] == "fwd") {
    s.kind = KernelKind::kForwardStep;
  } else if (parts[1] == "bwd") {
    s.kind = KernelKind::kBackwardStep;
  } else {
    throw_bad_input("kind '" + std::string(parts[1]) + "' in '" + u +
                    "' is not supported; allowed: fwd, bwd, bwd_pre, bwd_cvt");
  }
  s.dtype = parse_dtype(parts[2], u);
  s.head_dim = parse_prefixed(parts[3], "hd", "head_dim", uri);
  if (parts[4] == "causal") {
    s.causal = true;
  } else if (parts[4] == "full") {
    s.causal = false;
  } else {
    throw_bad_input("mask '" + std::string(parts[4]) + "' in '" + u + "' is not supported; allowed: causal, full");
  }
  s.gqa_group = parse_prefixed(parts[5], "gqa", "gqa_group", uri);
  s.block_m = parse_prefixed(parts[6], "bm", "block_m", uri);
  s.block_n = parse_prefixed(parts[7], "bn", "block_n", uri);
  s.warps = parse_prefixed(parts[8], "w", "warps", uri);
  s.stages = parse_prefixed(parts[9], "s", "stages", uri);
  validate_fields(s, uri);
  return s;
}

void KernelSpec::validate() const { validate_fields(*this, uri()); }

KernelSpec KernelSpec::default_for(Dtype dtype, int head_dim, bool causal, int gqa_group) {
  KernelSpec s;
  s.dtype = dtype;
  s.head_dim = head_dim;
  s.causal = causal;
  s.gqa_group = gqa_group;
  // Documented defaults (README, "Default configs"): 128x64 tiles with 4 warps up to head dim
  // 128; head dim 256 halves BLOCK_M so that the fp32 output accumulator fits in registers.
  s.block_m = head_dim <= 128 ? 128 : 64;
  s.block_n = 64;
  s.warps = 4;
  s.stages = 2;
  s.validate();
  return s;
}

KernelSpec KernelSpec::default_for_arch(Dtype dtype, int head_dim, bool causal, int gqa_group,
                                        std::string_view arch) {
  KernelSpec s = default_for(dtype, head_dim, causal, gqa_group);
  // Halving block_n first keeps the cp.async pipeline (the K/V tiles are most of the bytes).
  while (!check_feasibility(s, arch).feasible && s.block_n > 32) s.block_n /= 2;
  if (!check_feasibility(s, arch).feasible) s.stages = 1;
  if (!check_feasibility(s, arch).feasible)
    throw Error(ErrorKind::kInfeasible, "no default tile config of head dim " + std::to_string(head_dim) +
                                            " fits " + std::string(arch));
  return s;
}

namespace {
struct Tile {
  int bm, bn, warps, stages;
};
// `base` once per tile config, in the table's order.
template <size_t N>
std::vector<KernelSpec> with_tiles(const KernelSpec& base, const Tile (&tiles)[N]) {
  std::vector<KernelSpec> specs;
  for (const Tile& t : tiles) {
    KernelSpec s = base;
    s.block_m = t.bm;
    s.block_n = t.bn;
    s.warps = t.warps;
    s.stages = t.stages;
    specs.push_back(s);
  }
  return specs;
}

// One spec per supported (dtype, head dim, causal, group) combination, in table order.
template <typename MakeSpec>
void for_each_combination(std::vector<KernelSpec>* specs, MakeSpec make) {
  for (Dtype dtype : kSupportedDtypes)
    for (int hd : kSupportedHeadDims)
      for (bool causal : {false, true})
        for (int group : kSupportedGqaGroups) specs->push_back(make(dtype, hd, causal, group));
}
}  // namespace

std::vector<KernelSpec> KernelSpec::all_defaults() {
  std::vector<KernelSpec> specs;
  for_each_combination(&specs, default_for);
  return specs;
}

std::vector<KernelSpec> KernelSpec::candidates_for(Dtype dtype, int head_dim, bool causal,
                                                   int gqa_group) {
  // The configs `cpgen compile --all` checks for every combination; the tuner widens this set.
  static constexpr Tile kTiles[] = {
      {128, 64, 4, 2}, {128, 64, 4, 3}, {128, 128, 4, 2}, {128, 64, 8, 2}, {128, 128, 8, 2},
      {64, 64, 4, 2},  {64, 64, 4, 3},  {64, 128, 4, 2},  {128, 32, 4, 2}, {64, 32, 4, 3}};
  return with_tiles(default_for(dtype, head_dim, causal, gqa_group), kTiles);
}

KernelSpec KernelSpec::backward_pre(Dtype dtype, int head_dim, int warps) {
  KernelSpec s;
  s.kind = KernelKind::kBackwardPre;
  s.dtype = dtype;
  s.head_dim = head_dim;
  s.causal = false;
  s.gqa_group = 1;
  s.warps = warps;
  s.block_m = warps;  // one query row per warp
  s.block_n = 0;
  s.stages = 0;
  s.validate();
  return s;
}

KernelSpec KernelSpec::backward_convert(Dtype dtype, int head_dim, int warps) {
  KernelSpec s = backward_pre(dtype, head_dim, warps);
  s.kind = KernelKind::kBackwardConvert;
  s.validate();
  return s;
}

KernelSpec KernelSpec::backward_default_for(Dtype dtype, int head_dim, bool causal, int gqa_group) {
  KernelSpec s;
  s.kind = KernelKind::kBackwardStep;
  s.dtype = dtype;
  s.head_dim = head_dim;
  s.causal = causal;
  s.gqa_group = gqa_group;
  // A CTA owns 64 keys (32 at head dim 256) and walks 64-row query tiles. Warps split the keys in
  // 16-row slices and, past block_n / 16 warps, the head dim of dK/dV: 4 warps at head dim 64, 8
  // from 96 up, so that the per-warp dK/dV accumulators stay at 32 head-dim columns or fewer
  // than 64 (templates/traits_bwd.cuh). Head dim 256 keeps one Q/dO stage to fit sm_80's 163 KB.
  s.block_m = 64;
  s.block_n = head_dim == 256 ? 32 : 64;
  s.warps = head_dim == 64 ? 4 : 8;
  s.stages = head_dim == 256 ? 1 : 2;
  s.validate();
  return s;
}

KernelSpec KernelSpec::backward_default_for_arch(Dtype dtype, int head_dim, bool causal, int gqa_group,
                                                 std::string_view arch) {
  KernelSpec s = backward_default_for(dtype, head_dim, causal, gqa_group);
  // K and V stay resident for the whole CTA, so the Q/dO pipeline goes first (one stage), then
  // the query tile shrinks; the key tile, which sets how many warps share the dK/dV work, is kept.
  if (!check_feasibility(s, arch).feasible) s.stages = 1;
  while (!check_feasibility(s, arch).feasible && s.block_m > 16) s.block_m /= 2;
  if (!check_feasibility(s, arch).feasible)
    throw Error(ErrorKind::kInfeasible, "no default backward tile config of head dim " + std::to_string(head_dim) +
                                            " fits " + std::string(arch));
  return s;
}

std::vector<KernelSpec> KernelSpec::backward_defaults() {
  std::vector<KernelSpec> specs;
  for_each_combination(&specs, backward_default_for);
  for (Dtype dtype : kSupportedDtypes)
    for (int hd : kSupportedHeadDims) {
      specs.push_back(backward_pre(dtype, hd));
      specs.push_back(backward_convert(dtype, hd));
    }
  return specs;
}

std::vector<KernelSpec> KernelSpec::backward_candidates_for(Dtype dtype, int head_dim, bool causal,
                                                            int gqa_group) {
  static constexpr Tile kTiles[] = {
      {64, 64, 4, 2}, {64, 64, 8, 2}, {64, 64, 8, 1}, {64, 128, 8, 2}, {128, 64, 8, 2},
      {32, 64, 4, 2}, {64, 32, 8, 1}, {64, 32, 4, 2}, {128, 128, 16, 1}};
  return with_tiles(backward_default_for(dtype, head_dim, causal, gqa_group), kTiles);
}

std::string supported_archs_text() {
  std::string text;
  for (std::string_view a : kSupportedArchs) text += (text.empty() ? "" : ", ") + std::string(a);
  return text;
}

void validate_arch(std::string_view arch) {
  if (contains(std::span<const std::string_view>(kSupportedArchs), arch)) return;
  throw_bad_input("arch '" + std::string(arch) + "' is not supported; allowed: " + supported_archs_text());
}

int shared_memory_limit(std::string_view arch) {
  validate_arch(arch);
  // Per-block opt-in maximum of dynamic shared memory (cudaDevAttrMaxSharedMemoryPerBlockOptin),
  // from the CUDA C++ Programming Guide's table per compute capability, which
  // templates/traits.cuh holds once (shared_limit_for_arch, keyed by __CUDA_ARCH__): "sm_90a" is
  // 900, "sm_120" 1200.
  int number = 0;
  const std::string_view digits = arch.substr(3);
  std::from_chars(digits.data(), digits.data() + digits.size(), number);
  return device::shared_limit_for_arch(number * 10);
}

namespace {
// Registers ptxas uses beyond the fp32 accumulators (fragments, addresses, softmax state), as
// measured on the defaults: 53-81 on sm_80 and sm_90.
constexpr int kRegisterOverhead = 72;
}  // namespace

namespace {

// The backward's layout and budget are templates/traits_bwd.cuh's own (bwd_layout,
// kBwdAccumulatorBudget), so the verdict here is the one BwdTraits' static_asserts give.
// Registers ptxas uses beyond the fp32 accumulators, as measured on the backward defaults.
constexpr int kBwdRegisterOverhead = 72;

Feasibility check_backward_step(const KernelSpec& spec, std::string_view arch) {
  Feasibility f;
  f.shared_limit = shared_memory_limit(arch);
  const device::BwdLayout l = device::bwd_layout(dtype_bytes(spec.dtype), spec.head_dim, spec.block_m, spec.block_n,
                                                 spec.warps, spec.stages, spec.key_intervals);
  const int key_groups = l.key_groups, dim_splits = l.dim_splits;
  const int acc = l.accumulator_registers;
  // K and V once, Q and dO per stage, the 16-bit dS^T tile and the per-query-row table.
  f.shared_bytes = l.shared_bytes;
  f.register_estimate = std::min(255, acc + kBwdRegisterOverhead);
  if (spec.warps % key_groups != 0 || (spec.block_n / 16) % key_groups != 0) {
    f.reason = std::to_string(spec.warps) + " warps do not split " + std::to_string(spec.block_n) +
               " keys into equal 16-row slices";
  } else if (spec.head_dim % (16 * dim_splits) != 0) {
    f.reason = "head_dim " + std::to_string(spec.head_dim) + " does not split into " +
               std::to_string(dim_splits) + " warp slices of whole 16-column pairs (" +
               std::to_string(spec.warps) + " warps over " + std::to_string(spec.block_n) + " keys)";
  } else if (f.shared_bytes > f.shared_limit) {
    f.reason = "needs " + std::to_string(f.shared_bytes) + " bytes of shared memory; " +
               std::string(arch) + " allows " + std::to_string(f.shared_limit);
  } else if (acc > device::kBwdAccumulatorBudget) {
    f.register_estimate = acc + kBwdRegisterOverhead;
    f.reason = "needs " + std::to_string(acc) + " fp32 accumulator registers per thread (S, dP of " +
               std::to_string(spec.block_m) + " queries and dK, dV of " +
               std::to_string(spec.head_dim / dim_splits) + " columns); the budget is " +
               std::to_string(device::kBwdAccumulatorBudget);
  } else if (spec.block_m % spec.gqa_group != 0) {
    f.reason = "block_m " + std::to_string(spec.block_m) + " does not hold whole GQA groups of " +
               std::to_string(spec.gqa_group);
  }
  f.feasible = f.reason.empty();
  return f;
}

}  // namespace

Feasibility check_feasibility(const KernelSpec& spec, std::string_view arch) {
  spec.validate();
  if (spec.kind == KernelKind::kForwardWgmma) return check_wgmma_feasibility(spec, arch);
  if (spec.kind == KernelKind::kBackwardPre || spec.kind == KernelKind::kBackwardConvert) {
    Feasibility f;
    f.shared_limit = shared_memory_limit(arch);
    f.register_estimate = 32;  // pre: a dot product per lane and a shuffle reduction; convert: less
    f.feasible = true;
    return f;
  }
  if (spec.kind == KernelKind::kBackwardStep) return check_backward_step(spec, arch);
  Feasibility f;
  f.shared_limit = shared_memory_limit(arch);
  // The layout, sub-tile choice and budget are templates/traits.cuh's own (fwd_layout), so the
  // verdict here is the one FwdTraits' static_asserts give.
  const device::FwdLayout l = device::fwd_layout(dtype_bytes(spec.dtype), spec.head_dim, spec.block_m, spec.block_n,
                                                 spec.warps, spec.stages, spec.softcap);
  f.shared_bytes = l.shared_bytes;
  const int acc = l.accumulator_registers, budget = l.accumulator_budget;
  f.register_estimate = std::min(255, acc + kRegisterOverhead);
  if (f.shared_bytes > f.shared_limit) {
    f.reason = "needs " + std::to_string(f.shared_bytes) + " bytes of shared memory; " +
               std::string(arch) + " allows " + std::to_string(f.shared_limit);
  } else if (acc > budget) {
    f.register_estimate = acc + kRegisterOverhead;
    f.reason = "needs " + std::to_string(acc) + " fp32 accumulator registers per thread (" +
               std::to_string(spec.block_m / spec.warps) + " rows per warp x head_dim " +
               std::to_string(spec.head_dim) + "); the budget is " + std::to_string(budget) +
               " of 255 registers";
  } else if (spec.block_m % spec.gqa_group != 0) {
    f.reason = "block_m " + std::to_string(spec.block_m) + " does not hold whole GQA groups of " +
               std::to_string(spec.gqa_group);
  }
  f.feasible = f.reason.empty();
  return f;
}

}  // namespace cpgen
