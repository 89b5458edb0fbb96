// A workload: what one ring step kernel launch computes, as the tuning database keys it. A
// problem has one workload per step type that occurs in its ring schedule:
//   diagonal        step 0 of a causal ring: local Q against its own K/V (masked tiles).
//   full            a step whose keys are all visible (non-causal problems; causal contiguous
//                   steps receiving an earlier rank's chunk).
//   zigzag-kv-half  causal zigzag, chunk from an earlier rank: all local Q against the first
//                   half of the received K/V (the second half lies entirely in the future).
//   zigzag-q-half   causal zigzag, chunk from a later rank: the second half of local Q against
//                   all of the received K/V (the first half of Q sees none of it).
// Causal striped and zigzag-token layouts interleave positions, so every step is masked and
// shaped like the diagonal step; they tune the diagonal workload only.
//
// The backward ring has the same four step shapes under their own step types ("bwd-diagonal",
// "bwd-full", ...): a backward record is keyed, stored and looked up apart from the forward one
// of the same shape, and names a backward kernel (ring_bwd_...), never a forward one.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cache/environment.h"
#include "cpgen/problem.h"
#include "cpgen/types.h"

namespace cpgen {

enum class StepType {
  kDiagonal, kFull, kZigzagKvHalf, kZigzagQHalf,
  kBwdDiagonal, kBwdFull, kBwdZigzagKvHalf, kBwdZigzagQHalf
};
std::string_view step_type_name(StepType step);
StepType parse_step_type(std::string_view name);  // throws kBadInput naming the allowed values

bool is_backward(StepType step);
// The backward step type of a forward one's shape (kInternal for a backward argument).
StepType backward_of(StepType forward);
// The forward step type with the same Q and K/V shape (itself for a forward step type).
StepType forward_shape(StepType step);

// The mask features of a workload beyond causal / full: what picks the kernel's flags and what
// changes how much of each step's tile grid runs. Unmasked workloads (the default) are every
// workload an older database or exchange file holds.
//
// Packed documents are keyed by document_len, the mean length of the non-empty documents rounded
// up to a power of two, not by an exact digest of cu_seqlens: a training job packs a different
// set of documents into every batch, so an exact digest would name a workload no later call
// ever looks up again, while the work a step does (how many key tiles each query tile sees)
// follows the typical document length. The tuner times documents of exactly that length
// (tuner/step_inputs.h). The softcap is keyed on/off: its value is a kernel argument that does
// not change the work.
struct WorkloadMask {
  int64_t window_left = -1;   // FlashAttention's window_size; -1 unbounded
  int64_t window_right = -1;  // -1 unbounded (always under causal, where it is moot)
  int64_t document_len = 0;   // 0: one document; else a power of two
  bool softcap = false;

  // The kernel flags (KernelSpec key_intervals and softcap) this mask needs: for a problem's
  // mask, kernel_needs_key_intervals and kernel_needs_softcap (runtime/ring/kernel_support.h).
  bool key_intervals() const { return window_left >= 0 || window_right >= 0 || document_len > 0; }
  bool any() const { return key_intervals() || softcap; }
  // The canonical text: "" when unmasked, else space-separated "window=L,R", "doc-len=D",
  // "softcap" (in that order, each only when set); parse_workload_mask is its exact inverse.
  std::string name() const;
  bool operator==(const WorkloadMask&) const = default;
};
WorkloadMask parse_workload_mask(std::string_view text);  // throws kBadInput naming the token
// The mask of problem p's workloads (see WorkloadMask for the document rule).
WorkloadMask workload_mask_of(const Problem& p);

struct WorkloadKey {
  Dtype dtype = Dtype::kBf16;
  int head_dim = 128;
  int q_heads = 0;
  int kv_heads = 0;
  bool causal = true;
  int batch = 1;
  int64_t q_len = 0;   // local query rows per head in this step
  int64_t kv_len = 0;  // keys per head in this step
  Scheme scheme = Scheme::kZigzag;
  StepType step = StepType::kDiagonal;
  std::string gpu_name;
  std::string arch;
  int sm_count = 0;
  WorkloadMask mask;

  int gqa_group() const { return q_heads / kv_heads; }
  // q_len rounded up to a power of two: the sequence bucket of the nearest-bucket fallback.
  int64_t seq_bucket() const;
  // The same workload without its mask: what selection falls back to when the masked one was
  // never tuned (cache/lookup.h).
  WorkloadKey unmasked() const {
    WorkloadKey w = *this;
    w.mask = {};
    return w;
  }
  // e.g. "bf16 hd128 q32/kv8 causal b1 zigzag diagonal q16384 kv16384 on NVIDIA H200 (sm_90a, 132 SMs)",
  // with " mask window=256,-1 softcap" before " on" for a masked workload.
  std::string describe() const;
  // A masked workload adds "window_left", "window_right", "document_len" and "softcap"; an
  // unmasked one writes none of them, and from_json reads their absence as unmasked, so files
  // written before masks existed read back unchanged.
  nlohmann::json to_json() const;
  static WorkloadKey from_json(const nlohmann::json& j);  // throws kBadInput naming the field
  bool operator==(const WorkloadKey&) const = default;
};

std::vector<StepType> step_types_for(const Problem& p);
// The backward step types of p's backward ring: those of step_types_for, as backward types.
std::vector<StepType> backward_step_types_for(const Problem& p);
// The step type that `rank` runs in ring step `step` (0 .. cp_size-1) of a causal problem.
StepType step_type_at(const Problem& p, int rank, int step);
// The workload of step type `step` of p, with p's mask.
WorkloadKey workload_for(const Problem& p, StepType step, const DeviceClass& device);
std::vector<WorkloadKey> workloads_for(const Problem& p, const DeviceClass& device);

}  // namespace cpgen
