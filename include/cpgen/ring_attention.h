// RingAttention: the forward and backward rings of context-parallel attention on GPUs.
//
// Each rank holds Q, K, V for its positions of the sequence (partition scheme of the problem) as
// [batch, heads, rows, head_dim] tensors in the problem's dtype, rows = local_rows(rank) (ranks
// may hold different counts: packed documents, lengths that do not divide), laid out as the
// problem's layout says (Problem::layout: bhsd, bshd, sbhd, thd) or by explicit element strides
// (ShardStrides, cpgen/problem.h; K and V always in the problem's layout, because they travel the
// ring as they are). Tensors are read and written in place: cpgen never copies or transposes
// them, and an equal-shard ring sends the caller's K/V to the next rank straight from them. forward() runs
// cp_size ring steps: at each step the rank attends its queries to the K/V chunk it holds and
// passes that chunk to rank + 1, while the step kernel of the next step waits only for its own
// chunk (compute of step t overlaps the transfer for step t + 1). The result is the rank's rows of
// full attention over the whole sequence: out in the input dtype, lse (natural log) in fp32
// [batch, q_heads, local_seq].
//
// backward() runs the backward ring over the same shard: given the forward's out and lse and the
// output gradient dout (q's layout), it writes dq (q's layout), dk and dv (k's layout) in the
// input dtype. The K/V chunk travels as in the forward, and with it an fp32 dK/dV accumulator
// that collects every rank's contribution and is back on its owner after cp_size steps; dQ
// accumulates locally in fp32. Probabilities are recomputed from lse, so nothing of size
// seq x seq is kept. Beyond the forward's buffers a rank holds two fp32 dK/dV accumulators (the
// one it adds to and the one in flight): 4x the bytes of its bf16/fp16 K/V shard. The backward
// kernels (runtime/backend/gpu_bwd_kernels.h) are selected, compiled and loaded by the first
// backward call, through the same lookup with the backward step types.
//
// The step kernels are chosen when the ring is created, one per step type of the problem, through
// the tuning database (read, never created), then the shipped pretuned caches, then the documented
// default; step_kernels() says which answered and why, as `cpgen explain` does for the problem.
//
// No CUDA or NCCL header is needed here: streams (CUstream / cudaStream_t) and communicators
// (ncclComm_t) are passed as void*. Everything is asynchronous on the caller's stream; errors of
// queued work (a stalled NCCL peer, a failed launch) surface from synchronize() or the next call.
//
// Streams: one ring object may be called on several streams. Its buffers serve every call, so a
// call on another stream than the previous call's makes its stream wait (on the GPU, no host
// synchronization) for the previous call to complete. Calls are not thread-safe: one host thread
// at a time per ring object.
//
// Devices: the ring works in its device's primary context (the one the CUDA runtime and PyTorch
// use), and every call, the constructors and the destructor included, leaves the calling thread's
// current context (so the runtime's current device) as it found it; a thread that had none is
// left with the ring's.
//
// CUDA graph capture: both paths may be captured, from their second call on (a call on a
// capturing stream allocates nothing, creates no CUDA event and never synchronizes with the host):
// - nccl: forward. The first forward must run uncaptured (NCCL connects the peers, allocating
//   their buffers, on first use); capturing it is refused with kBadInput. The watchdog does not
//   watch exchanges of a graph (a captured event cannot be queried): a replay's NCCL errors
//   surface through the communicator's asynchronous error, not through a timeout.
// - loopback: forward and forward_all, likewise after one uncaptured call.
// - backward and backward_all, on either path, from the second backward on: the first backward
//   compiles and loads the backward kernels and allocates the dK/dV accumulators, so capturing
//   it is refused with kBadInput. (No GPU has run a captured backward yet.)
// A captured call that would have to wait for an uncaptured call still running on another stream
// is refused (a capture cannot wait on outside work): synchronize() first, or capture on that
// stream. Replays of a graph are ordered against other calls by the caller (launch the graph on
// the stream of those calls). synchronize() covers uncaptured calls only.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cpgen/config_source.h"
#include "cpgen/problem.h"

namespace cpgen {

const char* version();  // "0.1.0"

struct RingOptions {
  std::string database_path;         // tuning database (read, never created); empty: $CPGEN_DB,
                                     // else $XDG_CACHE_HOME/cpgen/cpgen.db, else ~/.cache/cpgen/cpgen.db
  int device = -1;                   // loopback: CUDA device ordinal; -1: 0; below: kBadInput
  double watchdog_seconds = 300;     // NCCL: a step whose transfer takes longer aborts the ring;
                                     // finite and > 0, else kBadInput
  std::string arch;                  // kernel target ("sm_90a"...); empty: from the device
  // SMs a persistent forward step leaves free for other kernels (NCCL's send and receive), as
  // FlashAttention-3's and TransformerEngine's SM margins do; its grid covers the rest and its CTAs
  // share the query blocks through a work counter. -1: $CPGEN_SM_MARGIN where set, else none: an
  // NCCL ring then runs a persistent winner as its plain launch, a loopback ring on every SM.
  // A margin below -1, or of the device's SM count or more, throws Error(kBadInput) when the ring
  // is made.
  // Unmeasured on a multi-GPU ring so far; step_kernels() says what each step runs.
  int sm_margin = -1;
};

// One virtual rank's tensors (loopback forward_all). strides: null for the problem's layout.
struct ShardPointers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;
  const ShardStrides* strides = nullptr;
};

// One virtual rank's tensors for the loopback backward_all: the forward's inputs and results,
// the output gradient, and the gradients written.
struct BackwardShardPointers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* out = nullptr;
  const float* lse = nullptr;
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  const ShardStrides* strides = nullptr;  // null: the problem's layout
};

// The kernel one step type of the ring runs and where its tile config came from: the tuning
// database, a shipped pretuned cache or the documented default, in the order and with the names
// that `cpgen explain` prints for the same problem.
struct StepKernelChoice {
  std::string step_type;  // "diagonal", "full", "zigzag-kv-half", "zigzag-q-half"
  std::string kernel_uri;
  ConfigSource source = ConfigSource::kDefault;
  std::string origin;     // database path, cache file, "KernelSpec::default_for" or (sm_90a) "forward_default_for_arch"
  std::string reason;     // one line; says why a database was not read when it was not
};

class RingAttention {
 public:
  // This process is one rank of an NCCL communicator (ncclComm_t as void*) of size cp_size; the
  // ring runs on the communicator's device. The ring never uses the caller's communicator after
  // construction: it runs on a communicator split from it here (ncclCommSplit, same ranks, so this
  // is collective: every rank of the communicator constructs its ring), and the watchdog aborts
  // only that one, so the caller's stays usable for other traffic and is destroyed by the caller
  // whenever it likes. Throws Error(kNccl) if cpgen was built without NCCL.
  static RingAttention nccl(const Problem& problem, void* nccl_comm, const RingOptions& options = {});
  // All cp_size ranks as virtual ranks of this process on one GPU (testing, single-GPU runs).
  static RingAttention loopback(const Problem& problem, const RingOptions& options = {});

  RingAttention(RingAttention&&) noexcept;
  RingAttention& operator=(RingAttention&&) noexcept;
  ~RingAttention();

  // The forward ring over this rank's shard (NCCL, or loopback with cp_size 1). strides: null
  // for the problem's layout; read during the call only. A stride that is not allowed fails with
  // kBadInput, one line naming the tensor, the stride and what is allowed. NCCL: a call that
  // fails after it began its first exchange (a launch error, say) aborts the ring's communicator
  // before it throws, since its peers wait for exchanges this rank will not issue; every later
  // call and synchronize() throw kNccl naming the cause. A failure before any exchange (bad
  // input, a refused first capture) or of a captured call leaves the ring usable. Backward
  // likewise.
  void forward(const void* q, const void* k, const void* v, void* out, float* lse, void* stream,
               const ShardStrides* strides = nullptr);
  // Loopback: the forward ring over every virtual rank; ranks.size() == cp_size.
  void forward_all(std::span<const ShardPointers> ranks, void* stream);
  // The backward ring over this rank's shard (NCCL, or loopback with cp_size 1): reads q, k, v,
  // out, lse (the forward's results for the same inputs) and dout; writes dq, dk, dv. Every
  // pointer 16-byte aligned (lse 4), none may alias another.
  void backward(const void* q, const void* k, const void* v, const void* out, const float* lse,
                const void* dout, void* dq, void* dk, void* dv, void* stream,
                const ShardStrides* strides = nullptr);
  // Loopback: the backward ring over every virtual rank; ranks.size() == cp_size.
  void backward_all(std::span<const BackwardShardPointers> ranks, void* stream);
  // Blocks until the last forward or backward finished; throws what went wrong in it.
  void synchronize();

  const Problem& problem() const;
  // The rows of rank `rank`'s shard (per batch entry and head): seq_len / cp_size when that
  // divides for the scheme, else what the partition gives that rank (runtime/ring/partition.h).
  int64_t local_rows(int rank) const;
  int rank() const;                    // -1 for loopback
  int device() const;                  // CUDA device ordinal the ring runs on
  // Ring step 0's kernel (the diagonal step of a causal ring), where its config came from
  // (config_source_name: "database-exact", ..., "default") and one line saying why.
  const std::string& kernel_uri() const;
  const std::string& config_source() const;
  const std::string& config_reason() const;
  // Every step type of the ring with its kernel; [0] is ring step 0's.
  const std::vector<StepKernelChoice>& step_kernels() const;
  // The same for the backward step types, selected at construction with the forward ones (their
  // kernels are compiled and loaded by the first backward call).
  const std::vector<StepKernelChoice>& backward_step_kernels() const;

  struct Impl;

 private:
  explicit RingAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cpgen
