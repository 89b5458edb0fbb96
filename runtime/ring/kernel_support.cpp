#include "runtime/ring/kernel_support.h"

#include "cpgen/error.h"
#include "generator/kernel_spec_wgmma.h"

namespace cpgen {

void check_kernel_ring_problem(const Problem& p, const std::string& what) {
  // Masks, softcap, layouts and unequal shards all run (kernel_support.h); a future kernel-side
  // limit is refused here in one line naming `what`.
  (void)p;
  (void)what;
}

bool kernel_needs_key_intervals(const Problem& p) {
  // has_window: a causal problem's window_right is moot (FlashAttention's causal window_size is
  // (left, 0); a user may well spell it so).
  return p.documents.size() > 1 || p.has_window();
}

bool kernel_needs_softcap(const Problem& p) { return p.softcap > 0; }

KernelFamilyAbilities kernel_family_abilities(KernelKind kind) {
  // Both forward families run everything today: templates/step_fwd_wgmma.cuh has the `_ivl` and
  // `_cap` specializations and writes the state at state_len's pitch, like step_fwd.cuh. A family
  // that lacks a feature says so here, and the backend, tuner, selection and `verify --spec`
  // follow.
  (void)kind;
  return KernelFamilyAbilities{};
}

bool zigzag_steps_run_halves(const Problem& p) {
  return p.causal && p.scheme == Scheme::kZigzag && p.cp_size > 1 && p.documents.size() <= 1;
}

std::string kernel_family_refusal(const KernelSpec& spec, const Problem& p) {
  const KernelFamilyAbilities a = kernel_family_abilities(spec.kind);
  const char* family = spec.kind == KernelKind::kForwardWgmma ? "the wgmma family" : "its family";
  const std::string fallback = "; use a ring_fwd_ (mma.sync) kernel";
  if (!a.key_intervals && kernel_needs_key_intervals(p))
    return spec.uri() + ": " + family + " has no key intervals (_ivl) yet, which the problem's " +
           (p.documents.size() > 1 ? "documents need" : "window needs") + fallback;
  if (!a.softcap && kernel_needs_softcap(p))
    return spec.uri() + ": " + family + " has no softcap (_cap) yet, which the problem needs" + fallback;
  return "";
}

namespace {
constexpr const char* kKernelFamilies[] = {"mma.sync", "wgmma", "wgmma-pingpong", "wgmma-persistent"};
}  // namespace

bool is_kernel_family(const std::string& name) {
  for (const char* family : kKernelFamilies)
    if (name == family) return true;
  return false;
}

KernelSpec family_default_spec(const Problem& p, const std::string& family, const std::string& where,
                               std::string_view arch) {
  if (!is_kernel_family(family)) {
    std::string allowed;
    for (const char* f : kKernelFamilies) allowed += (allowed.empty() ? "" : ", ") + std::string(f);
    throw_bad_input(where + ": family '" + family + "' is not known; allowed: " + allowed);
  }
  const bool mma_sync = family == "mma.sync";
  if (!arch.empty()) {
    try {
      validate_arch(arch);
    } catch (const Error& e) {
      throw_bad_input(where + ": " + e.what());
    }
    if (!mma_sync && arch != "sm_90a")
      throw_bad_input(where + ": family '" + family + "' runs on sm_90a only (wgmma and TMA), not on " +
                      std::string(arch) + "; allowed there: mma.sync");
  }
  const int group = static_cast<int>(p.q_heads / p.kv_heads);
  const int hd = static_cast<int>(p.head_dim);
  // mma.sync: the family's documented tiles whatever the arch's default is (on sm_90a the wgmma
  // family's for some shapes, generator/kernel_spec_wgmma.h), so that a benchmark can set the two
  // families side by side; on an arch with less shared memory, those tiles cut down to fit.
  KernelSpec spec = !mma_sync    ? wgmma_default_for(p.dtype, hd, p.causal, group)
                    : arch.empty() ? KernelSpec::default_for(p.dtype, hd, p.causal, group)
                                   : KernelSpec::default_for_arch(p.dtype, hd, p.causal, group, arch);
  spec.key_intervals = kernel_needs_key_intervals(p);
  spec.softcap = kernel_needs_softcap(p);
  spec.pingpong = family == "wgmma-pingpong";
  spec.persistent = family == "wgmma-persistent";
  return spec;
}

}  // namespace cpgen
