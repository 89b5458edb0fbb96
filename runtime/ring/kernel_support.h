// What the generated ring kernels (GPU, and the emulated backend that runs the same launches)
// support, checked before anything is allocated or compiled, and which mask features a problem
// asks of them. The kernels run every mask of the model (runtime/core/attention_shape.h: causal,
// sliding windows, packed documents), the softcap, every layout by strides and shards of unequal
// length (runtime/backend/kernel_ring_backend.h), so today nothing that Problem::validate accepts
// is refused here; this stays the one place a kernel-side limit would be stated.
#pragma once

#include <string>
#include <string_view>

#include "cpgen/problem.h"
#include "generator/kernel_spec.h"

namespace cpgen {

// Throws Error(kBadInput) with one line "<where>: <field> ... is not supported by the <what>
// yet; ..." for the first feature the step kernels lack. None today: it accepts every valid
// problem.
void check_kernel_ring_problem(const Problem& problem, const std::string& what = "GPU ring kernels");

// Whether the problem's mask needs the kernels specialized on key intervals (KernelSpec
// key_intervals): packed documents or a sliding window. Causal-only and full problems keep the
// kernels that compare positions, and so does a causal problem whose window has a right side
// only (0, or any other: causal ends every row's keys at its query).
bool kernel_needs_key_intervals(const Problem& problem);
// Whether the kernels must apply a logit softcap (KernelSpec softcap).
bool kernel_needs_softcap(const Problem& problem);

// Whether the zigzag half steps run on half the rows (the query-half step on the second chunk's
// queries, the kv-half step on the first chunk's keys): causal zigzag over more than one rank
// with at most one document. With documents each is split on its own, a rank's two chunks are
// not the halves of its rows, and every step runs at full size (the masks skip what no row
// sees). The ring backend launches by it and the workload keys (cache/workload.h) are sized by
// it, so that what the tuner times is what runs.
bool zigzag_steps_run_halves(const Problem& problem);

// What each forward kernel family can do. The one place such limits live: the ring backend, the
// tuner, the selection and `verify --spec` all ask here. Today both families (mma.sync and the
// sm_90a wgmma one) have every ability; a new family starts with the ones its template has.
struct KernelFamilyAbilities {
  bool key_intervals = true;  // `_ivl` kernels exist: documents and windows
  bool softcap = true;        // `_cap` kernels exist
  // The kernel writes the running state at RingFwdParams::state_len's row pitch, so a launch may
  // cover a view of the queries (the zigzag query-half step). Without it, the backend launches
  // such a step over every local row (the rows of the first chunk see no key of the chunk and
  // merge nothing), as it always does for the last step.
  bool query_view = true;
};
KernelFamilyAbilities kernel_family_abilities(KernelKind kind);

// "" when `spec` can run the forward steps of `problem` (in some form: see query_view), else one
// line saying what the kernel's family lacks, e.g. "ring_fwd_wgmma_...: the wgmma family has no
// key intervals (_ivl) yet, which the problem's documents or window need; use a ring_fwd_
// (mma.sync) kernel".
std::string kernel_family_refusal(const KernelSpec& spec, const Problem& problem);

// The forward kernel a named family runs by default for `problem`: "mma.sync" (that family's
// documented tiles, KernelSpec::default_for), "wgmma" (the sm_90a family's default tiles,
// generator/kernel_spec_wgmma.h), "wgmma-pingpong" (the same with the ping-pong schedule) or
// "wgmma-persistent" (the same tiles in the persistent launch, plain schedule), with
// the mask features the problem needs (_ivl, _cap). The one place a family name becomes a kernel:
// `verify --spec wgmma`, cpgen_family_kernel_uri and bench/kernels.py --pin wgmma all come here.
// Throws Error(kBadInput) "<where>: family '<name>' is not known; allowed: mma.sync, wgmma,
// wgmma-pingpong, wgmma-persistent" for another name.
// `arch` empty: the family's documented tiles, as on the 227 KB targets. Otherwise the tiles
// that fit `arch` (mma.sync: KernelSpec::default_for_arch, e.g. block_n 32 at head dim 256 on the
// 99 KB sm_89), and kBadInput for a wgmma family on an arch other than sm_90a or an arch that is
// not supported (one line each, naming what is allowed).
KernelSpec family_default_spec(const Problem& problem, const std::string& family, const std::string& where,
                               std::string_view arch = {});
// Whether `name` is one of the family names above.
bool is_kernel_family(const std::string& name);

}  // namespace cpgen
