#include "runtime/transport/nccl_transport.h"

#include <algorithm>

#include "cpgen/error.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/transport/nccl_check.h"
#include "runtime/ring/ring_driver.h"

namespace cpgen::gpu {

namespace {
constexpr auto kPollInterval = std::chrono::milliseconds(5);
}

int NcclTransport::device_of(ncclComm_t comm) {
  int device = 0;
  CPGEN_NCCL_CHECK(nccl::api().ncclCommCuDevice(comm, &device));
  return device;
}

NcclTransport::NcclTransport(ncclComm_t caller_comm, CUcontext context, double watchdog_seconds)
    : comm_(nullptr), context_(context), watchdog_seconds_(watchdog_seconds) {
  int caller_rank = 0;
  CPGEN_NCCL_CHECK(nccl::api().ncclCommUserRank(caller_comm, &caller_rank));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;    // start() relies on ncclGroupEnd returning with the group enqueued
  config.splitShare = 0;  // own resources: aborting this communicator leaves the parent's alone
  CPGEN_NCCL_CHECK(nccl::api().ncclCommSplit(caller_comm, /*color=*/0, /*key=*/caller_rank, &comm_, &config));
  try {
    CPGEN_NCCL_CHECK(nccl::api().ncclCommUserRank(comm_, &rank_));
    CPGEN_NCCL_CHECK(nccl::api().ncclCommCount(comm_, &size_));
    // Every event the forward ring uses, now: a captured forward must not create any.
    for (int s = 0; s + 1 < size_; ++s) {
      ready_events_[kv_exchange_id(s)] = std::make_unique<Event>();
      done_events_[kv_exchange_id(s)] = std::make_unique<Event>();
    }
    watches_.reserve(static_cast<size_t>(2 * size_));
  } catch (...) {
    nccl::api().ncclCommDestroy(comm_);
    throw;
  }
  watchdog_ = std::thread([this] { watchdog_loop(); });
}

NcclTransport::~NcclTransport() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  watchdog_.join();
  // An aborted communicator is already freed; otherwise the owner (RingAttention) waited for the
  // ring's last work before destroying this object.
  if (!aborted_) nccl::api().ncclCommDestroy(comm_);
}

Event& NcclTransport::event_for(std::map<int, std::unique_ptr<Event>>& events, int id, bool capturing) {
  auto& slot = events[id];
  if (!slot) {
    if (capturing)
      throw Error(ErrorKind::kBadInput,
                  "NCCL ring on rank " + std::to_string(rank_) + ": exchange " + std::to_string(id) +
                      " would create a CUDA event while the stream is being captured into a graph; "
                      "run this call once without capture first");
    slot = std::make_unique<Event>();
  }
  return *slot;
}

std::string NcclTransport::describe_stall(int id) const {
  const int prev = (rank_ - 1 + size_) % size_;
  const int next = (rank_ + 1) % size_;
  const ExchangeName name = exchange_name(id);  // the driver's ids (ring_driver.h)
  const std::string what = std::string(name.dkv ? "dK/dV" : "K/V") + " exchange" +
                           (name.part > 0 ? " (part " + std::to_string(name.part + 1) + ")" : "") +
                           " of ring step " + std::to_string(name.step);
  return "NCCL ring stalled on rank " + std::to_string(rank_) + " at " + what + ": receiving from rank " +
         std::to_string(prev) + " and sending to rank " + std::to_string(next) +
         " did not complete within " + std::to_string(watchdog_seconds_) +
         " s (rank " + std::to_string(prev) + " never sent?); the communicator was aborted";
}

void NcclTransport::check() const {
  std::lock_guard lock(mutex_);
  if (!error_.empty()) throw Error(ErrorKind::kNccl, error_);
}

void NcclTransport::run_call(const char* what, const std::function<void()>& call) {
  const int64_t starts_before = starts_;
  // A captured call's exchanges only enter the caller's graph: no peer waits on them, and the
  // failed capture is discarded (an abort, which frees memory, is not even allowed then).
  const bool capturing = is_capturing(compute_stream_);
  try {
    call();
  } catch (const std::exception& e) {
    if (!capturing && starts_ != starts_before)
      fire("NCCL ring on rank " + std::to_string(rank_) + ": a " + what +
           " failed after its exchanges began, and its peers wait for exchanges this rank will not "
           "issue; the communicator was aborted. The failure: " + e.what());
    throw;
  }
}

void NcclTransport::start(std::span<const RingExchange> exchanges, int id) {
  check();
  // Peers are inside this call from here on, whatever fails next (run_call); the refusals below
  // come only while capturing, whose failures run_call leaves alone.
  ++starts_;
  const cu::DriverApi& api = cu::driver();
  const bool capturing = is_capturing(compute_stream_);
  if (capturing && !connected_)
    throw Error(ErrorKind::kBadInput,
                "NCCL ring on rank " + std::to_string(rank_) +
                    ": the first forward of a ring cannot be captured into a CUDA graph (NCCL "
                    "connects the ring's peers and allocates their buffers on first use); run one "
                    "forward without capture first");
  Event& ready = event_for(ready_events_, id, capturing);
  Event& done = event_for(done_events_, id, capturing);
  ready.record(compute_stream_);
  CPGEN_CU_CHECK(api.cuStreamWaitEvent(comm_stream_.get(), ready.get(), 0));
  // The watch's own events (ready_events_ and done_events_ order the streams, and the next call
  // records them again, maybe before the GPU reaches this exchange).
  Event* watch_done = nullptr;
  Event* watch_reached = nullptr;
  if (!capturing) {
    std::lock_guard lock(mutex_);
    for (Watch& w : watches_) {
      if (!w.complete) continue;
      free_events_.push_back(std::move(w.reached));
      free_events_.push_back(std::move(w.done));
    }
    std::erase_if(watches_, [](const Watch& w) { return w.complete; });
    Watch watch;
    watch.id = id;
    watch.reached = pooled_event();
    watch.done = pooled_event();
    watch.started = std::chrono::steady_clock::now();
    watch_reached = watch.reached.get();
    watch_done = watch.done.get();
    watches_.push_back(std::move(watch));
  }
  // Recorded without the lock: a record may block while the launch queue is full, as it is when
  // the ring stalls, and the watchdog needs the lock to abort it (it reads `reached` only once
  // the watch is enqueued).
  if (watch_reached) watch_reached->record(comm_stream_.get());
  wake_.notify_all();
  const int prev = (rank_ - 1 + size_) % size_;
  const int next = (rank_ + 1) % size_;
  try {
    // Connection setup for a new peer happens inside the first group and may block until the
    // peer joins; the watchdog aborts the communicator if it never does, which makes this return.
    CPGEN_NCCL_CHECK(nccl::api().ncclGroupStart());
    // A send or receive that fails must still end the group: the group depth is per thread, and
    // while it is open every later NCCL call of this thread (the caller's own collectives too) is
    // only queued, never issued (NCCL user guide, "Group Calls").
    bool group_open = true;
    struct GroupCloser {
      const bool& open;
      ~GroupCloser() {
        if (open) nccl::api().ncclGroupEnd();  // unwinding already: its own error has nowhere to go
      }
    } closer{group_open};
    for (const RingExchange& e : exchanges) {
      CPGEN_NCCL_CHECK(nccl::api().ncclSend(e.send, e.bytes, ncclUint8, next, comm_, comm_stream_.get()));
      CPGEN_NCCL_CHECK(nccl::api().ncclRecv(e.recv, e.bytes, ncclUint8, prev, comm_, comm_stream_.get()));
    }
    group_open = false;  // ncclGroupEnd closes the group whether or not it succeeds
    CPGEN_NCCL_CHECK(nccl::api().ncclGroupEnd());
  } catch (const Error&) {
    if (watch_done) {
      // Nothing of this exchange was enqueued: its watch must not hold wait_idle (synchronize)
      // until the timeout and then abort the communicator as a stall.
      std::lock_guard lock(mutex_);
      for (Watch& w : watches_)
        if (w.done.get() == watch_done) w.complete = true;
    }
    check();  // the watchdog's message names the stalled peer; prefer it
    throw;
  }
  done.record(comm_stream_.get());
  if (!capturing) {
    watch_done->record(comm_stream_.get());
    std::lock_guard lock(mutex_);
    for (Watch& w : watches_)
      if (w.done.get() == watch_done) w.enqueued = true;
    connected_ = true;
  }
}

std::unique_ptr<Event> NcclTransport::pooled_event() {
  if (free_events_.empty()) return std::make_unique<Event>();
  std::unique_ptr<Event> event = std::move(free_events_.back());
  free_events_.pop_back();
  return event;
}

void NcclTransport::finish(int id) {
  check();
  auto it = done_events_.find(id);
  if (it == done_events_.end())
    throw Error(ErrorKind::kInternal, "NCCL transport: rank " + std::to_string(rank_) +
                                          " finished exchange " + std::to_string(id) +
                                          " that was never started");
  CPGEN_CU_CHECK(cu::driver().cuStreamWaitEvent(compute_stream_, it->second->get(), 0));
}

void NcclTransport::wait_idle() {
  std::unique_lock lock(mutex_);
  while (error_.empty()) {
    bool idle = std::all_of(watches_.begin(), watches_.end(), [](const Watch& w) { return w.complete; });
    if (idle) break;
    wake_.wait_for(lock, kPollInterval);
  }
  if (!error_.empty()) throw Error(ErrorKind::kNccl, error_);
  for (Watch& w : watches_) {
    free_events_.push_back(std::move(w.reached));
    free_events_.push_back(std::move(w.done));
  }
  watches_.clear();
}

void NcclTransport::fire(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (!error_.empty()) return;
    error_ = why;
  }
  aborted_ = true;
  // Unblocks any NCCL call in progress on the owning thread and ends the ring's kernels; the
  // communicator is unusable afterwards, as the error says.
  nccl::api().ncclCommAbort(comm_);
  wake_.notify_all();
}

void NcclTransport::watchdog_loop() {
  cu::driver().cuCtxSetCurrent(context_);
  // This thread never captures: in the thread-local mode another thread's capture (global mode
  // forbids event queries from every thread, and a query would invalidate that capture) leaves
  // its queries alone.
  if (cu::driver().cuThreadExchangeStreamCaptureMode) {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    cu::driver().cuThreadExchangeStreamCaptureMode(&mode);
  }
  const auto timeout = std::chrono::duration<double>(watchdog_seconds_);
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, kPollInterval);
    if (stopping_ || !error_.empty()) continue;
    ncclResult_t async = ncclSuccess;
    if (nccl::api().ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress) {
      std::string why = "NCCL ring failed on rank " + std::to_string(rank_) + ": " +
                        nccl::api().ncclGetErrorString(async);
      const char* last = nccl::api().ncclGetLastError(comm_);
      if (last && *last) why += " (" + std::string(last) + ")";
      lock.unlock();
      fire(why);
      lock.lock();
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    std::string stall;
    // The exchanges run in order on the one comm stream, so only the oldest incomplete one can be
    // the stalled one: it alone is timed, from when the GPU reached it, or, not reached yet, from
    // when it was issued or its predecessor completed, whichever is later (a host running calls
    // ahead issued the later ones long before the GPU could reach them).
    bool predecessor_completed = false;
    for (Watch& w : watches_) {
      if (w.complete) continue;
      if (predecessor_completed && !w.on_gpu) w.started = std::max(w.started, now);
      predecessor_completed = false;
      if (w.enqueued) {
        CUresult status = w.on_gpu ? CUDA_SUCCESS : cu::driver().cuEventQuery(w.reached->get());
        if (status == CUDA_SUCCESS && !w.on_gpu) {
          w.on_gpu = true;
          w.started = now;
        }
        if (status == CUDA_SUCCESS) status = cu::driver().cuEventQuery(w.done->get());
        if (status == CUDA_SUCCESS) {
          w.complete = true;
          predecessor_completed = true;
          continue;
        }
        if (status != CUDA_ERROR_NOT_READY) {
          stall = "NCCL ring on rank " + std::to_string(rank_) + ": exchange " +
                  std::to_string(w.id) + " failed on the GPU: " + cu::describe(status);
          break;
        }
      }
      if (now - w.started > timeout) stall = describe_stall(w.id);
      break;  // the later ones wait for this one
    }
    if (!stall.empty()) {
      lock.unlock();
      fire(stall);
      lock.lock();
    }
  }
}

}  // namespace cpgen::gpu
