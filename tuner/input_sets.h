// How many copies of a workload's inputs the GPU timers rotate through, shared by the forward and
// backward timers: enough sets that one pass over them is four times the L2 (so no launch finds
// the previous one's data in it), at least two, at most kMaxInputSets, and never more than half
// of the device's free memory.
#pragma once

#include <cstddef>
#include <string>

namespace cpgen {

// 256 sets span four 50 MiB L2s down to sets of 0.8 MiB (a step of microseconds). The cap was 8,
// under which every set below 6 MiB (a 512-token step of a small model: 4.8 MiB) rotated through
// 8 copies that all fit the L2 together, so each launch found its data warm (a reviewer's find).
inline constexpr size_t kMaxInputSets = 256;

// The rule on its own (the CPU tests check it): throws Error(kCuda) naming `what` (e.g. "input set
// of <workload>") when one set alone needs more than half of free_bytes.
size_t input_set_count(size_t l2_bytes, size_t free_bytes, size_t set_bytes, const std::string& what);

// The same with device `device`'s L2 size and free memory (the current context's), from the driver.
size_t device_input_set_count(int device, size_t set_bytes, const std::string& what);

}  // namespace cpgen
