// `cpgen verify --backend emulated`: the forward and backward rings with the generated kernels run by the CUDA
// emulator on the CPU (runtime/backend/emulated_ring.h): the same KernelRingBackend, launches,
// grids and params as the GPU, ranks on host threads over the CPU transport. The kernel of each
// step type is what selection chooses for the problem (the database, the shipped caches, the
// default, as `cpgen explain --arch sm_90` shows), or what --spec names. Checks out and lse,
// and dq, dk, dv when the vectors have gradients (or the problem is --random), with the bf16/fp16
// tolerances of the GPU backend. Needs a host C++ compiler, no GPU.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cpgen/error.h"
#include "generator/kernel_spec_wgmma.h"
#include "runtime/api/kernel_select.h"
#include "runtime/backend/emulated_ring.h"
#include "runtime/core/json_text.h"
#include "runtime/ring/kernel_support.h"
#include "tools/cli/verify_backend.h"

namespace cpgen::cli {
namespace {

// Selection and feasibility assume this GPU: the kernels the emulator runs are the ones an H100
// would get when no database says otherwise.
constexpr const char* kSelectionArch = "sm_90";

// The kernel each step type runs, forward and backward: what --spec names, else selection's.
struct ChosenKernels {
  std::vector<std::pair<StepType, KernelSpec>> forward, backward;
};

// --spec values: "URI" for every step type of its direction (a ring_fwd_ URI for the forward, a
// ring_bwd_ one for the backward), or "STEP=URI" for one (STEP as `cpgen explain` names step
// types: diagonal, ..., bwd-diagonal, ...), or a family name (kernel_support.h: "wgmma" for the
// sm_90a family's default tiles of the problem with its mask's flags, "wgmma-pingpong" and
// "wgmma-persistent" for the same tiles in the ping-pong schedule or the persistent launch), so
// one command line serves every vectors file. Checked against the problem: a kernel of another
// dtype, head dim, mask or group would compute something else.
ChosenKernels specs_from_options(const Problem& p, const std::vector<std::string>& values) {
  const std::vector<StepType> forward_steps = step_types_for(p), backward_steps = backward_step_types_for(p);
  ChosenKernels chosen;
  auto set = [](std::vector<std::pair<StepType, KernelSpec>>& list, StepType step, const KernelSpec& spec) {
    for (auto& entry : list)
      if (entry.first == step) {
        entry.second = spec;
        return;
      }
    list.emplace_back(step, spec);
  };
  auto step_names = [&] {
    std::string names;
    for (const auto* steps : {&forward_steps, &backward_steps})
      for (StepType s : *steps) names += (names.empty() ? "" : ", ") + std::string(step_type_name(s));
    return names;
  };
  for (const std::string& value : values) {
    const auto eq = value.find('=');
    const std::string uri = eq == std::string::npos ? value : value.substr(eq + 1);
    KernelSpec spec;
    try {
      if (is_kernel_family(uri)) {
        spec = family_default_spec(p, uri, "--spec");
      } else {
        spec = KernelSpec::parse(uri);
      }
    } catch (const Error& e) {
      throw_bad_input("--spec '" + value + "': " + e.what());
    }
    const bool backward = spec.kind == KernelKind::kBackwardStep;
    if (!backward && spec.kind != KernelKind::kForwardStep && spec.kind != KernelKind::kForwardWgmma)
      throw_bad_input("--spec '" + value + "': not a ring step kernel (ring_fwd_... for a forward step, ring_bwd_... for "
                      "a backward one; the preprocessing and conversion kernels come with the backward)");
    if (spec.dtype != p.dtype || spec.head_dim != p.head_dim || spec.causal != p.causal ||
        spec.gqa_group != p.q_heads / p.kv_heads)
      throw_bad_input("--spec '" + value + "': the kernel is for " + std::string(dtype_name(spec.dtype)) + " hd" +
                      std::to_string(spec.head_dim) + (spec.causal ? " causal" : " full") + " group " +
                      std::to_string(spec.gqa_group) + ", the problem is " + std::string(dtype_name(p.dtype)) +
                      " hd" + std::to_string(p.head_dim) + (p.causal ? " causal" : " full") + " group " +
                      std::to_string(p.q_heads / p.kv_heads));
    // A family without a feature the problem needs (none today: kernel_support.h).
    if (const std::string why = kernel_family_refusal(spec, p); !why.empty())
      throw_bad_input("--spec '" + value + "': " + why);
    // A tile the GPU it stands for could not run (its shared memory, registers): the user's
    // choice, refused as such (it failed later as an internal infeasibility, exit 1).
    const std::string arch = spec.kind == KernelKind::kForwardWgmma ? std::string(kWgmmaArch) : kSelectionArch;
    if (const Feasibility f = check_feasibility(spec, arch); !f.feasible)
      throw_bad_input("--spec '" + value + "': the kernel cannot run on " + arch + ": " + f.reason);
    // The mask features are part of what a kernel computes: a window or documents need the key
    // intervals (_ivl), a softcap needs _cap, and a kernel with them on a problem without would
    // read interval tables the backend does not pass.
    const bool intervals = kernel_needs_key_intervals(p), softcap = kernel_needs_softcap(p);
    if (spec.key_intervals != intervals || spec.softcap != softcap)
      throw_bad_input("--spec '" + value + "': the kernel is " +
                      (spec.key_intervals ? "with" : "without") + " key intervals (_ivl) and " +
                      (spec.softcap ? "with" : "without") + " softcap (_cap); the problem needs " +
                      (intervals ? "_ivl" : "no _ivl") + " (documents or a window) and " +
                      (softcap ? "_cap" : "no _cap"));
    auto& list = backward ? chosen.backward : chosen.forward;
    const std::vector<StepType>& steps = backward ? backward_steps : forward_steps;
    if (eq == std::string::npos) {
      for (StepType step : steps) set(list, step, spec);
      continue;
    }
    StepType step;
    try {
      step = parse_step_type(value.substr(0, eq));
    } catch (const Error&) {
      throw_bad_input("--spec '" + value + "': '" + printable(value.substr(0, eq), 40) +
                      "' is not a step type of this problem; its step types: " + step_names());
    }
    if (std::find(steps.begin(), steps.end(), step) == steps.end()) {
      const std::vector<StepType>& others = backward ? forward_steps : backward_steps;
      const bool other_direction = std::find(others.begin(), others.end(), step) != others.end();
      throw_bad_input("--spec '" + value + "': " +
                      (other_direction ? std::string("a ") + (backward ? "backward" : "forward") + " kernel cannot run the " +
                                             std::string(step_type_name(step)) + " step"
                                       : "this problem has no " + std::string(step_type_name(step)) + " step") +
                      "; its step types: " + step_names());
    }
    set(list, step, spec);
  }
  // Step types no --spec named run what selection chooses.
  const RingKernelSelection selection = select_ring_kernels(p, "", kSelectionArch);
  for (auto [selected, list] : {std::pair{&selection.steps, &chosen.forward}, std::pair{&selection.backward_steps, &chosen.backward}})
    for (const auto& [workload, s] : *selected) {
      bool given = false;
      for (const auto& entry : *list) given = given || entry.first == workload.step;
      if (!given) list->emplace_back(workload.step, s.spec);
    }
  // Ring step 0's type first: it is the main kernel of the device.
  for (size_t i = 0; i < chosen.forward.size(); ++i)
    if (chosen.forward[i].first == forward_steps.front()) std::swap(chosen.forward[i], chosen.forward.front());
  return chosen;
}

// (step type, URI) of each step's kernel.
StepKernelNames names_of(const std::vector<std::pair<StepType, KernelSpec>>& steps) {
  StepKernelNames names;
  for (const auto& [step, spec] : steps) names.emplace_back(std::string(step_type_name(step)), spec.uri());
  return names;
}

VerifyReport run_emulated(const VerifyRequest& r) {
  const AttentionVectors& vec = *r.vectors;
  if (!r.dtype.empty() && r.dtype != "bf16" && r.dtype != "fp16")
    throw_bad_input("--dtype " + r.dtype + " is not supported by --backend emulated; allowed: bf16, fp16");
  const Dtype dtype = r.dtype.empty() ? Dtype::kBf16 : parse_dtype(r.dtype);
  if (!r.transport.empty() && r.transport != "threads")
    throw_bad_input("--transport " + r.transport + " is not supported by --backend emulated; allowed: threads");
  const Problem p = request_problem(r, dtype);
  check_kernel_ring_problem(p, "emulated ring kernels");
  const ChosenKernels kernels = specs_from_options(p, r.specs);
  const auto& per_step = kernels.forward;
  const std::vector<float> q(vec.q.begin(), vec.q.end()), k(vec.k.begin(), vec.k.end()),
      v(vec.v.begin(), vec.v.end());
  // The backward runs when there are gradients to check it against (as --backend gpu), with the
  // backward kernels selection chooses.
  const bool run_backward = !vec.dout.empty() && (r.sampled || !vec.dq.empty());
  EmulatedBackward backward;
  if (run_backward) {
    backward.steps = kernels.backward;
    backward.pre = KernelSpec::backward_pre(p.dtype, static_cast<int>(p.head_dim));
    backward.convert = KernelSpec::backward_convert(p.dtype, static_cast<int>(p.head_dim));
    backward.dout.assign(vec.dout.begin(), vec.dout.end());
  }
  // The wgmma family is feasible on sm_90a only; the mma.sync kernels fit sm_90a as they fit sm_90.
  bool any_wgmma = false;
  for (const auto& entry : per_step) any_wgmma = any_wgmma || entry.second.kind == KernelKind::kForwardWgmma;
  const std::string arch(any_wgmma ? kWgmmaArch : std::string_view(kSelectionArch));
  EmulatedRingResult ring =
      run_emulated_ring(p, per_step, arch, q, k, v, default_kernel_store(), run_backward ? &backward : nullptr);
  VerifyReport report;
  const std::string kernel_text =
      ring_kernels_text(names_of(per_step), run_backward ? names_of(backward.steps) : StepKernelNames{});
  report.precision = kernel_text + "; emulated on the CPU, " + std::to_string(r.ranks) +
                     (r.ranks == 1 ? " rank" : " ranks on threads") + layout_note(r);
  char timing[160];
  std::snprintf(timing, sizeof timing, "%ld kernel launches emulated in %.0f ms (summed over ranks)", ring.launches,
                ring.launch_ms);
  report.notes.push_back(timing);
  add_half_precision_checks(r, {std::move(ring.out), std::move(ring.lse), std::move(ring.dq), std::move(ring.dk),
                                std::move(ring.dv)},
                            run_backward, &report);
  return report;
}

const VerifyBackendRegistrar kEmulatedBackend(
    {"emulated",
     "bf16/fp16 forward and backward rings of the generated kernels run by the CUDA emulator on the CPU (no GPU; needs a host "
     "C++ compiler; --dtype bf16, the default for a vectors file, or fp16; --spec to choose kernels)",
     run_emulated, /*takes_spec=*/true});

}  // namespace
}  // namespace cpgen::cli
