// What the generated ring kernels (GPU, and the emulated backend that runs the same launches)
// support, checked before anything is allocated or compiled, and which mask features a problem
// asks of them. The kernels run every mask of the model (runtime/core/attention_shape.h: causal,
// sliding windows, packed documents), the softcap, every layout by strides and shards of unequal
// length (runtime/backend/kernel_ring_backend.h), so today nothing that Problem::validate accepts
// is refused here; this stays the one place a kernel-side limit would be stated.
#pragma once

#include <string>

#include "cpgen/problem.h"

namespace cpgen {

// Throws Error(kBadInput) with one line "<where>: <field> ... is not supported by the <what>
// yet; ..." for the first feature the step kernels lack. None today: it accepts every valid
// problem.
void check_kernel_ring_problem(const Problem& problem, const std::string& what = "GPU ring kernels");

// Whether the problem's mask needs the kernels specialized on key intervals (KernelSpec
// key_intervals): packed documents or a sliding window. Causal-only and full problems keep the
// kernels that compare positions.
bool kernel_needs_key_intervals(const Problem& problem);
// Whether the kernels must apply a logit softcap (KernelSpec softcap).
bool kernel_needs_softcap(const Problem& problem);

}  // namespace cpgen
