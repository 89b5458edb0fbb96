// Loopback transport: N virtual ranks of one process on one GPU. Each virtual rank has its own
// compute stream; RingAttention drives all of them from the calling thread with ring_forward_all
// (runtime/ring/ring_driver.h), a fixed schedule in which every rank starts an exchange before any
// rank finishes it. An exchange becomes device-to-device copies on the receiving rank's
// communication stream, ordered by events:
//
//   copy into rank r  waits for  ready(r)     (r finished reading its receive slot)
//                                ready(r - 1) (r - 1 finished writing its send slot)
//   finish(id) on r   makes r's compute stream wait for the copy into r and for the copy out of
//                     r's send slot (into r + 1), so the slot may be overwritten afterwards.
//
// Whichever of the two ranks of a copy posts second enqueues it; nothing ever waits for the GPU
// inside the ring. The ring also works with one host thread per rank (the transport tests do
// that): then finish waits, bounded by the timeout, for the neighbours' posts.
//
// An exchange's events are created once and reused from a pool: after the first run, a run
// creates no events (re-recording an event is safe; a wait already enqueued keeps the record it
// saw), so the per-call host work is the copies, the event records and the waits.
//
// Exchange ids are reused (the backward reuses the forward's, and every run starts again at 0),
// so exchanges pair use by use: the k-th start of an id on one rank meets the k-th start of that
// id on its neighbours, as in the CPU transport. A rank that runs ahead into the next use of an
// id therefore never mistakes a neighbour's unfinished earlier use for its own.
#pragma once

#include <cuda.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "runtime/cuda/gpu_stream.h"
#include "runtime/ring/transport.h"

namespace cpgen::gpu {

class LoopbackRing {
 public:
  // timeout_seconds bounds how long one virtual rank waits for another to post an exchange (a
  // rank whose thread failed); it never bounds GPU work.
  LoopbackRing(int size, double timeout_seconds = 60);
  ~LoopbackRing();
  LoopbackRing(const LoopbackRing&) = delete;
  LoopbackRing& operator=(const LoopbackRing&) = delete;

  int size() const { return size_; }
  Transport& endpoint(int rank);
  // The stream rank's backend computes on (set before each ring run).
  void set_compute_stream(int rank, CUstream stream);
  // Called when a virtual rank's thread fails: wakes the others, who then throw `why`.
  void abort(const std::string& why);
  // Forget exchanges left over from a failed run.
  void reset();
  // Exchanges ready for reuse without creating events (a captured run must not create any).
  size_t spare_exchanges() const;
  // Makes `stream` wait for everything enqueued so far on the communication streams. A run that
  // fails leaves the copies of exchanges no rank finished there, which no compute stream waits
  // for; the caller orders its stream after them so that they cannot outlive its wait.
  void order_after_copies(CUstream stream);

 private:
  class Endpoint;
  struct Exchange;

  void start(int rank, std::span<const RingExchange> exchanges, int id);
  void finish(int rank, int id);
  void enqueue_copy_into(Exchange& exchange, int receiver, int id);
  using ExchangeKey = std::pair<int, long long>;  // (exchange id, use of that id)

  int size_;
  double timeout_seconds_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::vector<std::unique_ptr<Stream>> comm_streams_;  // one per receiving rank
  std::vector<std::unique_ptr<Event>> comm_marks_;     // order_after_copies' events, one per stream
  std::vector<CUstream> compute_streams_;
  mutable std::mutex mutex_;
  std::condition_variable posted_;
  std::map<ExchangeKey, std::unique_ptr<Exchange>> exchanges_;
  std::vector<std::unique_ptr<Exchange>> spare_;  // finished exchanges, events kept for reuse
  std::vector<std::map<int, long long>> starts_;    // per rank: how often it started each id
  std::vector<std::map<int, long long>> finishes_;  // per rank: how often it finished each id
  std::string abort_reason_;
};

}  // namespace cpgen::gpu
