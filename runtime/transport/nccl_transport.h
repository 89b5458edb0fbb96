// NCCL transport: one rank of the ring per process (or per GPU), on an NCCL communicator.
//
// start(id) makes a dedicated communication stream (of the greatest priority, so the block
// scheduler gives NCCL's kernels the first free SMs) wait for the compute stream, then issues one
// NCCL group holding, for every buffer, ncclSend to rank + 1 and ncclRecv from rank - 1. Grouping
// is what keeps the ring free of cycles of waiting: NCCL schedules the sends and receives of a
// group together, so no rank's send waits for a receive that waits on it (every rank sending
// first with blocking semantics would deadlock a ring). finish(id) only makes the compute stream
// wait for the group's completion event; the host never blocks inside the ring.
//
// A watchdog thread polls ncclCommGetAsyncError and each exchange's own pair of events (taken from
// a pool and recorded by that exchange alone: the per-id events that order the streams are
// recorded again by the next call of the ring, often before the GPU has reached this one, and a
// watch on them never saw its exchange complete when the host ran a call ahead). The exchanges
// run in order on one stream, so only the oldest incomplete one is timed: if it has not completed
// within the timeout, counted from when the GPU reached it (while it has not, from when it was
// issued or its predecessor completed, whichever is later), it aborts the communicator
// (ncclCommAbort) and records an error
// naming this rank, the ring step and the peers; start/finish/check() throw it from then on. The
// watchdog thread queries in the thread-local capture mode, so that another thread capturing a
// graph in the global mode (PyTorch's default) neither forbids its queries nor is broken by them.
//
// The communicator the watchdog may abort is cpgen's own. The caller's communicator often carries
// data- or tensor-parallel traffic too, and aborting it under the caller (who then destroys it)
// would be a use after free. So the constructor splits the caller's communicator with one color
// for every rank and key = rank (ncclCommSplit: same ranks, same order, new communicator), with
// resource sharing off, so that aborting ours leaves the caller's usable. A split rather than
// ncclCommInitRank with a fresh id: the split needs no id broadcast (which would be a collective
// on the caller's communicator plus a device buffer for the id), and NCCL builds it from the
// parent's bootstrap. Like any NCCL communicator creation it is collective: every rank of the
// caller's communicator must construct its transport.
//
// CUDA graph capture (the compute stream capturing): the exchange is captured like any NCCL call,
// using only events created at construction, and is not watched (a captured event cannot be
// queried; replays of the graph report NCCL failures through ncclCommGetAsyncError only). The
// first exchange must not be captured: NCCL connects the ring's peers, allocating their buffers,
// on first use; start() refuses that with a clear error.
#pragma once

#include <cuda.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cuda/gpu_stream.h"
#include "runtime/ring/transport.h"

namespace cpgen::gpu {

class NcclTransport final : public Transport {
 public:
  // Splits `caller_comm` (borrowed, only during the constructor) into a communicator this object
  // owns, aborts or destroys. `context` is the communicator's device's primary context.
  NcclTransport(ncclComm_t caller_comm, CUcontext context, double watchdog_seconds);
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;
  ~NcclTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void set_compute_stream(CUstream stream) { compute_stream_ = stream; }
  void start(std::span<const RingExchange> exchanges, int id) override;
  void finish(int id) override;

  // Runs one call of the ring on this transport (`call` issues its exchanges: ring_forward or
  // ring_backward), named `what` ("forward") in the error. An exception that leaves the call
  // after it began its first exchange aborts the communicator before it is rethrown: the peers
  // are inside the same call, waiting for exchanges this rank will not issue, and a later call of
  // this rank would pair its exchanges with theirs of this one (wrong K/V, silently, or a hang).
  // From then on start/finish/check() throw an error naming this rank, `what` and the cause. An
  // exception before the call's first exchange (bad input) leaves the ring as it was, and so does
  // any exception of a captured call (its exchanges only entered the caller's graph, which the
  // failed capture discards; the refused first capture is one).
  void run_call(const char* what, const std::function<void()>& call);
  // Throws the watchdog's error if it fired.
  void check() const;
  // Blocks until every started exchange completed (or the watchdog fired, then throws).
  void wait_idle();
  static int device_of(ncclComm_t comm);
  // The communicator the ring runs on (owned; never the caller's).
  ncclComm_t comm() const { return comm_; }

 private:
  struct Watch {
    int id = 0;
    std::unique_ptr<Event> reached;  // recorded on the comm stream where the exchange begins
    std::unique_ptr<Event> done;     // and where it ends; both recorded by this exchange only
    std::chrono::steady_clock::time_point started;  // issued, then reached by the GPU
    bool enqueued = false;  // the NCCL group returned and `done` is recorded
    bool on_gpu = false;    // `reached` completed: the timeout counts from then
    bool complete = false;
  };

  void watchdog_loop();
  void fire(const std::string& why);  // aborts the communicator once
  std::string describe_stall(int id) const;
  Event& event_for(std::map<int, std::unique_ptr<Event>>& events, int id, bool capturing);
  std::unique_ptr<Event> pooled_event();  // under mutex_; never while capturing

  ncclComm_t comm_;
  CUcontext context_;
  double watchdog_seconds_;
  int rank_ = 0, size_ = 1;
  CUstream compute_stream_ = nullptr;
  // At the greatest priority: NCCL's send and receive kernels then take the first SMs that the
  // step kernel's CTAs free instead of waiting behind the step's CTAs not yet started.
  Stream comm_stream_{StreamPriority::kHighest};
  std::map<int, std::unique_ptr<Event>> ready_events_, done_events_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Watch> watches_;
  std::vector<std::unique_ptr<Event>> free_events_;  // the events of completed watches, for reuse
  std::string error_;
  std::atomic<bool> aborted_{false};
  int64_t starts_ = 0;        // start() calls past check(), failed ones too (run_call compares them)
  bool connected_ = false;  // an uncaptured exchange went through: NCCL has connected the peers
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace cpgen::gpu
