// NCCL transport: one rank of the ring per process (or per GPU), on an NCCL communicator.
//
// start(id) makes a dedicated communication stream wait for the compute stream, then issues one
// NCCL group holding, for every buffer, ncclSend to rank + 1 and ncclRecv from rank - 1. Grouping
// is what keeps the ring free of cycles of waiting: NCCL schedules the sends and receives of a
// group together, so no rank's send waits for a receive that waits on it (every rank sending
// first with blocking semantics would deadlock a ring). finish(id) only makes the compute stream
// wait for the group's completion event; the host never blocks inside the ring.
//
// A watchdog thread polls ncclCommGetAsyncError and the completion events. An exchange that has
// not completed within the timeout aborts the communicator (ncclCommAbort) and records an error
// naming this rank, the ring step and the peers; start/finish/check() throw it from then on.
#pragma once

#include <cuda.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
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
  // Borrows `comm` (the caller destroys it, after this object). `context` is the communicator's
  // device's primary context.
  NcclTransport(ncclComm_t comm, CUcontext context, double watchdog_seconds);
  ~NcclTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void set_compute_stream(CUstream stream) { compute_stream_ = stream; }
  void start(std::span<const RingExchange> exchanges, int id) override;
  void finish(int id) override;

  // Throws the watchdog's error if it fired.
  void check() const;
  // Blocks until every started exchange completed (or the watchdog fired, then throws).
  void wait_idle();
  static int device_of(ncclComm_t comm);

 private:
  struct Watch {
    int id = 0;
    CUevent done = nullptr;
    std::chrono::steady_clock::time_point started;
    bool enqueued = false;  // the NCCL group returned and `done` is recorded
    bool complete = false;
  };

  void watchdog_loop();
  void fire(const std::string& why);  // aborts the communicator once
  std::string describe_stall(int id) const;
  Event& event_for(std::map<int, std::unique_ptr<Event>>& events, int id);

  ncclComm_t comm_;
  CUcontext context_;
  double watchdog_seconds_;
  int rank_ = 0, size_ = 1;
  CUstream compute_stream_ = nullptr;
  Stream comm_stream_;
  std::map<int, std::unique_ptr<Event>> ready_events_, done_events_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Watch> watches_;
  std::string error_;
  std::atomic<bool> aborted_{false};
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace cpgen::gpu
