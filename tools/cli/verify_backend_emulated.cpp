// `cpgen verify --backend emulated`: the forward and backward rings with the generated kernels run by the CUDA
// emulator on the CPU (runtime/backend/emulated_ring.h): the same KernelRingBackend, launches,
// grids and params as the GPU, ranks on host threads over the CPU transport. The kernel of each
// step type is what selection chooses for the problem (the database, the shipped caches, the
// default, as `cpgen explain --arch sm_90` shows), or --spec for the forward. Checks out and lse,
// and dq, dk, dv when the vectors have gradients (or the problem is --random), with the bf16/fp16
// tolerances of the GPU backend. Needs a host C++ compiler, no GPU.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cpgen/error.h"
#include "generator/kernel_spec_wgmma.h"
#include "runtime/api/kernel_select.h"
#include "runtime/backend/emulated_ring.h"
#include "runtime/ring/kernel_support.h"
#include "tools/cli/verify_backend.h"

namespace cpgen::cli {
namespace {

// Selection and feasibility assume this GPU: the kernels the emulator runs are the ones an H100
// would get when no database says otherwise.
constexpr const char* kSelectionArch = "sm_90";

// --spec values: "URI" for every step type, or "STEP=URI" for one (STEP as `cpgen explain`
// names step types), or a family name (kernel_support.h: "wgmma" for the sm_90a family's default
// tiles of the problem with its mask's flags, "wgmma-pingpong" and "wgmma-persistent" for the
// same tiles in the ping-pong schedule or the persistent launch), so one command line serves
// every vectors file. Checked against the problem: a kernel of another dtype, head dim,
// mask or group would compute something else.
std::vector<std::pair<StepType, KernelSpec>> specs_from_options(const Problem& p,
                                                                const std::vector<std::string>& values) {
  const std::vector<StepType> steps = step_types_for(p);
  std::vector<std::pair<StepType, KernelSpec>> chosen;
  auto set = [&](StepType step, const KernelSpec& spec) {
    for (auto& entry : chosen)
      if (entry.first == step) {
        entry.second = spec;
        return;
      }
    chosen.emplace_back(step, spec);
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
    if (spec.kind != KernelKind::kForwardStep && spec.kind != KernelKind::kForwardWgmma)
      throw_bad_input("--spec '" + value + "': not a forward step kernel (the emulated backend checks the forward)");
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
    if (eq == std::string::npos) {
      for (StepType step : steps) set(step, spec);
      continue;
    }
    StepType step;
    try {
      step = parse_step_type(value.substr(0, eq));
    } catch (const Error& e) {
      throw_bad_input("--spec '" + value + "': " + e.what());
    }
    bool used = false;
    for (StepType s : steps) used = used || s == step;
    if (!used) {
      std::string names;
      for (StepType s : steps) names += (names.empty() ? "" : ", ") + std::string(step_type_name(s));
      throw_bad_input("--spec '" + value + "': this problem has no " + std::string(step_type_name(step)) +
                      " step; its step types: " + names);
    }
    set(step, spec);
  }
  // Step types no --spec named run what selection chooses.
  const RingKernelSelection selection = select_ring_kernels(p, "", kSelectionArch);
  for (const auto& [workload, s] : selection.steps) {
    bool given = false;
    for (const auto& entry : chosen) given = given || entry.first == workload.step;
    if (!given) chosen.emplace_back(workload.step, s.spec);
  }
  // Ring step 0's type first: it is the main kernel of the device.
  for (size_t i = 0; i < chosen.size(); ++i)
    if (chosen[i].first == steps.front()) std::swap(chosen[i], chosen.front());
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
  const auto per_step = specs_from_options(p, r.specs);
  const std::vector<float> q(vec.q.begin(), vec.q.end()), k(vec.k.begin(), vec.k.end()),
      v(vec.v.begin(), vec.v.end());
  // The backward runs when there are gradients to check it against (as --backend gpu), with the
  // backward kernels selection chooses.
  const bool run_backward = !vec.dout.empty() && (r.sampled || !vec.dq.empty());
  EmulatedBackward backward;
  if (run_backward) {
    for (const auto& [workload, s] : select_ring_kernels(p, "", kSelectionArch).backward_steps)
      backward.steps.emplace_back(workload.step, s.spec);
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
  const std::string kernels = ring_kernels_text(names_of(per_step), run_backward ? names_of(backward.steps) : StepKernelNames{});
  report.precision = kernels + "; emulated on the CPU, " + std::to_string(r.ranks) +
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
     "C++ compiler; --dtype bf16 or fp16; --spec to choose kernels)",
     run_emulated, /*takes_spec=*/true});

}  // namespace
}  // namespace cpgen::cli
