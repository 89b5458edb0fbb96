// The transport interface: how one rank of the ring hands buffers to its neighbours.
//
// The ring driver (runtime/ring/ring_driver.h) is the only caller. It moves opaque byte buffers whose
// memory the backend owns (host memory for the CPU backend, device memory for a GPU backend);
// the transport never allocates or interprets them. Implementations: CPU threads
// (runtime/transport/cpu_transport.h), single-GPU loopback and NCCL (branch gpu).
//
// Contract, for every implementation:
// - Ring direction is fixed: in an exchange, rank r sends each buffer to rank (r + 1) % N and
//   receives the matching buffer from rank (r - 1 + N) % N. Exchange i of the list on the
//   sender pairs with exchange i of the list on the receiver; their byte counts must agree.
// - Every rank calls start()/finish() with the same exchange ids in the same order (the driver
//   guarantees this), so a transport may match by id or by order. Several ids may be in flight
//   at the same time (the backward ring overlaps a K/V exchange with a dK/dV exchange). An id is
//   reused only after it was finished (the backward reuses the forward's ids); the k-th exchange
//   with a given id on one rank pairs with the k-th exchange with that id on its neighbours.
// - start(exchanges, id) begins the exchange. It is ordered after all work the backend issued
//   before the call (a GPU transport records an event on the compute stream and makes its
//   communication stream wait on it; a CPU transport runs after the host finished that work).
//   It may return before any byte moved. Until finish(id) returns, the caller must not write
//   the send buffers nor read or write the receive buffers.
// - finish(id) makes all backend work issued after it see the received bytes, and frees the send
//   buffers for reuse. A GPU transport only enqueues a stream wait and never blocks the host; a
//   CPU transport blocks until the bytes are there.
// - A failure (a peer that failed, stalled past the transport's watchdog, mismatched sizes)
//   throws cpgen::Error naming the rank, the exchange id and the peer; it never hangs forever.
#pragma once

#include <cstddef>
#include <span>

namespace cpgen {

// One buffer of an exchange: `send` goes to the next rank, `recv` is filled from the previous.
struct RingExchange {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t bytes = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void start(std::span<const RingExchange> exchanges, int id) = 0;
  virtual void finish(int id) = 0;
};

}  // namespace cpgen
