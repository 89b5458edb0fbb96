#include "generator/kernel_spec_wgmma.h"

#include <algorithm>
#include <charconv>
#include <span>

#include "cpgen/error.h"
#include "cpgen/traits_wgmma.cuh"

namespace cpgen {
namespace {

constexpr const char* kWgmmaForm =
    "ring_fwd_wgmma_<bf16|fp16>_hd<N>_<causal|full>[_ivl][_cap]_gqa<N>_bm<N>_bn<N>_c<N>_s<N>[_pingpong][_persistent]";

std::string join(std::span<const int> values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

void check_value(std::string_view field, int value, std::span<const int> allowed, std::string_view where) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return;
  throw_bad_input(std::string(field) + " " + std::to_string(value) + " is not supported by the wgmma family in '" +
                  std::string(where) + "'; allowed: " + join(allowed));
}

std::vector<std::string_view> split(std::string_view text) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t end = text.find('_', start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

// "<prefix><decimal>" exactly: no sign, no leading zeros, nothing after.
int read_number(std::string_view part, std::string_view prefix, std::string_view field, std::string_view uri) {
  auto fail = [&]() -> int {
    throw_bad_input("field " + std::string(field) + " in '" + std::string(uri) + "' must read '" + std::string(prefix) +
                    "<number>', got '" + std::string(part) + "'");
  };
  if (part.size() <= prefix.size() || part.substr(0, prefix.size()) != prefix) return fail();
  const std::string_view digits = part.substr(prefix.size());
  if (digits.size() > 1 && digits[0] == '0') return fail();
  int value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return fail();
  return value;
}

}  // namespace

int wgmma_consumers(const KernelSpec& spec) { return spec.warps / 4 - 1; }

bool is_wgmma_uri(std::string_view uri) { return uri.substr(0, 15) == "ring_fwd_wgmma_"; }

std::string wgmma_uri(const KernelSpec& s) {
  return "ring_fwd_wgmma_" + std::string(dtype_name(s.dtype)) + "_hd" + std::to_string(s.head_dim) +
         (s.causal ? "_causal" : "_full") + (s.key_intervals ? "_ivl" : "") + (s.softcap ? "_cap" : "") + "_gqa" +
         std::to_string(s.gqa_group) + "_bm" + std::to_string(s.block_m) +
         "_bn" + std::to_string(s.block_n) + "_c" + std::to_string(wgmma_consumers(s)) + "_s" +
         std::to_string(s.stages) + (s.pingpong ? "_pingpong" : "") + (s.persistent ? "_persistent" : "");
}

KernelSpec parse_wgmma_uri(std::string_view uri) {
  const std::string u(uri);
  std::vector<std::string_view> parts = split(uri);
  KernelSpec s;
  s.kind = KernelKind::kForwardWgmma;
  // The optional mask tokens follow causal/full in the mma.sync family's order (kernel_spec.cpp):
  // _ivl (per-query key intervals), then _cap (logit softcap). Taking them out leaves 11 fields.
  constexpr size_t kMaskTokens = 6;
  if (parts.size() > kMaskTokens && parts[kMaskTokens] == "ivl") {
    s.key_intervals = true;
    parts.erase(parts.begin() + kMaskTokens);
  }
  if (parts.size() > kMaskTokens && parts[kMaskTokens] == "cap") {
    s.softcap = true;
    parts.erase(parts.begin() + kMaskTokens);
  }
  if (parts.size() > 11 && parts.back() == "persistent") {
    s.persistent = true;
    parts.pop_back();
  }
  if (parts.size() == 12 && parts.back() == "pingpong") {
    s.pingpong = true;
    parts.pop_back();
  }
  if (parts.size() != 11 || parts[0] != "ring" || parts[1] != "fwd" || parts[2] != "wgmma")
    throw_bad_input("kernel URI '" + u + "' is malformed; expected " + kWgmmaForm);
  if (parts[3] == "bf16") {
    s.dtype = Dtype::kBf16;
  } else if (parts[3] == "fp16") {
    s.dtype = Dtype::kFp16;
  } else {
    throw_bad_input("dtype '" + std::string(parts[3]) + "' in '" + u + "' is not supported; allowed: bf16, fp16");
  }
  s.head_dim = read_number(parts[4], "hd", "head_dim", uri);
  if (parts[5] == "causal") {
    s.causal = true;
  } else if (parts[5] == "full") {
    s.causal = false;
  } else {
    throw_bad_input("mask '" + std::string(parts[5]) + "' in '" + u +
                    "' is not supported by the wgmma family; allowed: causal, full");
  }
  s.gqa_group = read_number(parts[6], "gqa", "gqa_group", uri);
  s.block_m = read_number(parts[7], "bm", "block_m", uri);
  s.block_n = read_number(parts[8], "bn", "block_n", uri);
  const int consumers = read_number(parts[9], "c", "consumers", uri);
  check_value("consumers", consumers, kSupportedWgmmaConsumers, uri);
  s.warps = 4 * (1 + consumers);
  s.stages = read_number(parts[10], "s", "stages", uri);
  validate_wgmma(s, uri);
  return s;
}

void validate_wgmma(const KernelSpec& s, std::string_view where) {
  check_value("head_dim", s.head_dim, kSupportedWgmmaHeadDims, where);
  check_value("gqa_group", s.gqa_group, kSupportedWgmmaGqaGroups, where);
  check_value("block_n", s.block_n, kSupportedWgmmaBlockN, where);
  check_value("stages", s.stages, kSupportedWgmmaStages, where);
  if (s.warps % 4 != 0) {
    throw_bad_input("warps " + std::to_string(s.warps) + " in '" + std::string(where) +
                    "' is not whole warpgroups; the wgmma family has 4 (1 + consumers) warps");
  }
  check_value("consumers", wgmma_consumers(s), kSupportedWgmmaConsumers, where);
  if (s.pingpong && wgmma_consumers(s) != 2) {
    throw_bad_input("pingpong in '" + std::string(where) + "' needs 2 consumer warpgroups (it alternates their MMAs); got " +
                    std::to_string(wgmma_consumers(s)));
  }
  if (s.block_m != 64 * wgmma_consumers(s)) {
    throw_bad_input("block_m " + std::to_string(s.block_m) + " in '" + std::string(where) + "' must be 64 x " +
                    std::to_string(wgmma_consumers(s)) + " consumers = " + std::to_string(64 * wgmma_consumers(s)) +
                    " (each consumer warpgroup owns 64 rows)");
  }
}

// The layout and budget are templates/traits_wgmma.cuh's own (constexpr, host and device), so
// a spec judged feasible here asks for exactly the shared memory its kernel will.
Feasibility check_wgmma_feasibility(const KernelSpec& spec, std::string_view arch) {
  Feasibility f;
  f.shared_limit = shared_memory_limit(arch);
  f.shared_bytes = device::wgmma_fwd_layout(spec.head_dim, spec.block_m, spec.block_n, wgmma_consumers(spec),
                                            spec.stages, spec.persistent)
                       .shared_bytes;
  // A consumer thread holds S (block_n / 2) and O (head_dim / 2) in fp32, plus about 60 more.
  const int accumulators = spec.block_n / 2 + spec.head_dim / 2;
  f.register_estimate = std::min(255, accumulators + 60);
  if (arch != kWgmmaArch) {
    f.reason = "the wgmma family runs on " + std::string(kWgmmaArch) + " only (wgmma, TMA, setmaxnreg); got " +
               std::string(arch);
  } else if (const int budget = device::wgmma_accumulator_budget(wgmma_consumers(spec)); accumulators > budget) {
    // First: no stage count or shared memory size can make up for it.
    f.reason = "needs " + std::to_string(accumulators) + " fp32 accumulator registers per thread (S and O); the " +
               "budget is " + std::to_string(budget) + " at " + std::to_string(wgmma_consumers(spec)) +
               " consumer warpgroups";
  } else if (f.shared_bytes > f.shared_limit) {
    f.reason = "needs " + std::to_string(f.shared_bytes) + " bytes of shared memory; " + std::string(arch) +
               " allows " + std::to_string(f.shared_limit);
  } else if (spec.block_m % spec.gqa_group != 0) {
    f.reason = "block_m " + std::to_string(spec.block_m) + " does not hold whole GQA groups of " +
               std::to_string(spec.gqa_group);
  }
  f.feasible = f.reason.empty();
  return f;
}

KernelSpec wgmma_default_for(Dtype dtype, int head_dim, bool causal, int gqa_group) {
  KernelSpec s;
  s.kind = KernelKind::kForwardWgmma;
  s.dtype = dtype;
  s.head_dim = head_dim;
  s.causal = causal;
  s.gqa_group = gqa_group;
  s.block_m = 128;
  // Head dim 256: a 128-register O accumulator per consumer thread leaves room for 64-key S tiles
  // (32 registers; 128 keys would need 64; 80 keys, 40, are a tuner candidate until a GPU has
  // timed them), and its tiles fill 192 KB of shared at 2 stages.
  s.block_n = head_dim == 256 ? 64 : 128;
  s.warps = 12;  // one producer and two consumer warpgroups
  s.stages = 2;
  s.validate();
  return s;
}

std::vector<KernelSpec> wgmma_defaults() {
  std::vector<KernelSpec> specs;
  for (Dtype dtype : kSupportedDtypes)
    for (int hd : kSupportedWgmmaHeadDims)
      for (bool causal : {false, true})
        for (int group : kSupportedWgmmaGqaGroups) specs.push_back(wgmma_default_for(dtype, hd, causal, group));
  return specs;
}

bool wgmma_is_default(Dtype dtype, int head_dim, int gqa_group, std::string_view arch) {
  if (arch != kWgmmaArch) return false;
  for (const WgmmaDefaultShape& shape : kWgmmaDefaultShapes)
    if (shape.dtype == dtype && shape.head_dim == head_dim && shape.gqa_group == gqa_group) return true;
  return false;
}

KernelSpec forward_default_for_arch(Dtype dtype, int head_dim, bool causal, int gqa_group, std::string_view arch) {
  if (wgmma_is_default(dtype, head_dim, gqa_group, arch)) return wgmma_default_for(dtype, head_dim, causal, gqa_group);
  return KernelSpec::default_for_arch(dtype, head_dim, causal, gqa_group, arch);
}

}  // namespace cpgen
