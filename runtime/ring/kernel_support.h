// What the generated ring kernels (GPU, and the emulated backend that runs the same launches)
// support today, checked before anything is allocated or compiled. The problem model is wider
// (issue 11): the CPU ring runs packed documents, sliding windows and softcaps; until the kernels
// do, they must refuse rather than run them wrong. Layouts and unequal shards run on both.
#pragma once

#include <string>

#include "cpgen/problem.h"

namespace cpgen {

// Throws Error(kBadInput) with one line "<where>: <field> ... is not supported by the <what>
// yet; ..." for the first feature the step kernels lack: documents, window_left, window_right,
// softcap.
void check_kernel_ring_problem(const Problem& problem, const std::string& what = "GPU ring kernels");

}  // namespace cpgen
