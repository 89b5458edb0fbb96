// The ring driver: the forward and backward loops of ring attention, shared by every backend
// (CPU reference, GPU) and every transport (CPU threads, loopback, NCCL). The driver decides the
// order of compute and communication; the backend owns the memory and does the math.
//
// Forward, N ranks, step s = 0 .. N-1 on rank r (kv chunk of rank kv_source_rank(r, s, N)):
//   start  K/V exchange: kv slot s%2 -> next rank's slot (s+1)%2     (skipped on the last step)
//   compute forward_step on kv slot s%2: merge into the fp32 running state; the last step
//          normalizes and writes out and lse
//   finish K/V exchange
// so the transfer of the chunk for step s+1 overlaps the compute of step s (double buffering).
//
// Backward: the K/V chunk travels as in the forward; an fp32 dK/dV accumulator travels with it
// and collects every rank's contribution to that chunk. Step s on rank r:
//   start  K/V exchange (not on the last step)
//   compute backward_step on kv slot s%2: dQ += local contribution; dK/dV contribution of the
//          local queries to the held chunk into the backend's partial buffer
//   finish the dK/dV exchange of step s-1 (s > 0): dkv slot s%2 now holds the accumulator of
//          the held chunk from the ranks before this one
//   accumulate dkv slot s%2 (+)= partial
//   start  dK/dV exchange: dkv slot s%2 -> next rank's dkv slot (s+1)%2
//   finish K/V exchange
// After step N-1 the accumulator in flight belongs to rank r+1's chunk and holds all N ranks'
// contributions; the final exchange delivers it, so after N exchanges every rank holds the dK/dV
// of its own chunk in dkv slot N%2, and backward_end writes them out.
// A backend may instead do the whole step's work in accumulate_dkv (the kernel ring backend does:
// its step kernel adds into the arrived accumulator directly, which needs no partial buffer);
// backward_step then only records the step.
//
// Parts. A backend may split each chunk's accumulator into dkv_parts() parts (the kernel ring
// backend: the chunk's first and second half of keys) that travel as separate exchanges. Then
// "finish the dK/dV exchange of step s-1, accumulate, start the dK/dV exchange of step s" above
// runs once per part, in part order, so the transfer of part p of step s-1 overlaps the
// accumulation (compute) of the parts before it in step s, and the last part's transfer overlaps
// the first part of the next step. With one part (the default) nothing changes.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "runtime/ring/transport.h"

namespace cpgen {

// A backend-owned buffer, described for the transport.
struct BufferView {
  void* data = nullptr;
  size_t bytes = 0;
};

// What a step computes on.
struct RingStep {
  int step = 0;          // 0 .. N-1
  int kv_slot = 0;       // which of the two K/V buffers holds the chunk (step % 2)
  int kv_rank = 0;       // the rank whose positions the chunk covers: kv_source_rank(rank, step, N)
  bool is_first = false;
  bool is_last = false;
};
// Step `step` of rank `rank` in a ring of `size`, as the driver runs it.
RingStep make_step(int rank, int step, int size);

// One rank's compute and memory. Calls arrive in the order the driver documents above; a GPU
// backend only enqueues work on its compute stream.
class RingBackend {
 public:
  virtual ~RingBackend() = default;

  // The K and V buffers of kv slot 0 or 1 (same order and sizes in both slots, and on every
  // rank); these travel around the ring.
  virtual std::vector<BufferView> kv_buffers(int slot) = 0;
  // What the first K/V exchange (step 0) sends: by default kv slot 0, which forward_begin and
  // backward_begin filled. A backend whose own chunk already lies in buffers of the slots' sizes
  // (the caller's tensors) returns those instead and skips that copy; only the send side
  // changes, so slot 0 is still where step 1 receives.
  virtual std::vector<BufferView> first_kv_send_buffers() { return kv_buffers(0); }
  // The fp32 dK and dV accumulators of dkv slot 0 or 1 (backward only).
  virtual std::vector<BufferView> dkv_buffers(int slot) = 0;

  // Forward: put the rank's own K/V into kv slot 0 (or where first_kv_send_buffers says) and
  // start from an empty running state.
  virtual void forward_begin() = 0;
  // Attention of the local queries against the held chunk, merged into the running state; on
  // step.is_last also the normalized output and the LSE (natural log).
  virtual void forward_step(const RingStep& step) = 0;

  // Backward: own K/V into kv slot 0, dQ = 0, and the per-row term D = rowsum(dO * O).
  virtual void backward_begin() = 0;
  // dQ += contribution of the held chunk; partial dK/dV of the held chunk from the local queries
  // (overwrites the partial buffer). Probabilities are recomputed from the saved LSE.
  virtual void backward_step(const RingStep& step) = 0;
  // dkv slot `slot` = partial (is_first) or dkv slot + partial.
  virtual void accumulate_dkv(int slot, bool is_first) = 0;
  // Optional: the accumulator in parts (see the driver's comment above). dkv_part_buffers lists
  // part `part`'s buffers of a dkv slot (same order and sizes on every rank), and
  // accumulate_dkv_part does accumulate_dkv for that part only.
  virtual int dkv_parts() const { return 1; }
  virtual std::vector<BufferView> dkv_part_buffers(int slot, int part) {
    (void)part;
    return dkv_buffers(slot);
  }
  virtual void accumulate_dkv_part(int slot, bool is_first, int part) {
    (void)part;
    accumulate_dkv(slot, is_first);
  }
  // Write dQ, and dK/dV from dkv slot `slot` (which holds this rank's own chunk).
  virtual void backward_end(int slot) = 0;
};

// Run the forward / backward ring of this rank. Throws what the backend or transport throws.
void ring_forward(RingBackend& backend, Transport& transport);
void ring_backward(RingBackend& backend, Transport& transport);

// The forward ring of every rank of a ring from one host thread (the loopback ring of one GPU:
// backends[r] and transports[r] are rank r's). Each rank makes the same calls in the same order as
// ring_forward; the ranks interleave in a fixed schedule instead of racing on threads:
//   forward_begin of ranks 0 .. N-1
//   for each step s: start the K/V exchange of ranks 0 .. N-1, then forward_step of ranks
//                    0 .. N-1, then finish of ranks 0 .. N-1
// Every rank has started an exchange before any rank finishes it, so a transport whose finish
// needs both neighbours' starts (loopback) never waits on another thread. A transport whose finish
// blocks until a neighbour finishes (the CPU threads transport) cannot be driven this way.
void ring_forward_all(std::span<RingBackend* const> backends, std::span<Transport* const> transports);

// The backward ring of every rank from one host thread, as ring_forward_all does for the forward.
// Each rank makes the calls of ring_backward in the same order; the fixed schedule is
//   backward_begin of ranks 0 .. N-1
//   for each step s: start the K/V exchange of every rank (not on the last step), backward_step of
//                    every rank, finish the dK/dV exchange of step s-1 of every rank (s > 0),
//                    accumulate_dkv of every rank, start the dK/dV exchange of step s of every
//                    rank, finish the K/V exchange of every rank
//   finish the last dK/dV exchange of every rank, then backward_end of every rank
// The dK/dV exchange of step s is started by every rank in step s and finished in step s+1 (or
// after the loop), so here too every rank has started an exchange before any rank finishes it.
void ring_backward_all(std::span<RingBackend* const> backends, std::span<Transport* const> transports);

// Exchange ids the driver uses, so every rank agrees (K/V of step s, dK/dV of step s).
inline int kv_exchange_id(int step) { return 2 * step; }
// A dK/dV part past the first gets ids far above any step's (cp_size stays far below 2^19).
inline constexpr int kExchangePartShift = 20;
inline int dkv_exchange_id(int step, int part = 0) { return 2 * step + 1 + (part << kExchangePartShift); }

// The inverse of kv_exchange_id and dkv_exchange_id, for messages that name an exchange.
struct ExchangeName {
  bool dkv = false;  // dK/dV (backward), else K/V
  int step = 0;
  int part = 0;  // the dK/dV part (0 for K/V)
};
inline ExchangeName exchange_name(int id) {
  const int part = id >> kExchangePartShift, in_part = id & ((1 << kExchangePartShift) - 1);
  return {in_part % 2 == 1, in_part / 2, part};
}

}  // namespace cpgen
