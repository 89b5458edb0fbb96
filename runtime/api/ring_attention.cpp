// RingAttention (include/cpgen/ring_attention.h): one ring driver (runtime/ring/ring_driver.h) over
// the GPU backend, with the loopback or the NCCL transport, forward and backward. Kernels are
// selected per step type (forward and backward) by select_ring_kernels
// (runtime/api/kernel_select.h), the lookup `cpgen explain` uses.
//
// Loopback enqueues every virtual rank's steps from the calling thread (ring_forward_all, a fixed
// schedule), each rank on its own compute stream forked from and joined back into the caller's
// stream with events, so the ranks' step kernels overlap each other and the copies.
//
// One ring object serves calls on several streams: its K/V slots and running state are shared by
// every call, so a call on another stream than the previous one first makes its stream wait for
// the previous call's completion event (on the GPU; the host never waits).
#include "cpgen/ring_attention.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "cpgen/error.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/gpu_stream.h"
#include "runtime/cuda/module.h"
#include "runtime/backend/gpu_device.h"
#include "runtime/backend/kernel_ring_backend.h"
#include "runtime/api/kernel_select.h"
#include "runtime/transport/loopback_transport.h"
#include "runtime/ring/ring_driver.h"
#include "runtime/ring/kernel_support.h"
#ifdef CPGEN_HAVE_NCCL
#include "runtime/transport/nccl_transport.h"
#endif

namespace cpgen {

const char* version() { return CPGEN_VERSION; }

struct RingAttention::Impl {
  Problem problem;
  RingOptions options;
  int rank = -1;  // -1: loopback
  int device = 0;
  std::vector<StepKernelChoice> choices;
  std::string main_source;
  std::unique_ptr<gpu::StepKernel> kernel;
  std::string arch;
  // Loaded by the first backward call.
  std::unique_ptr<gpu::BackwardKernels> backward_kernels;
  std::vector<StepKernelChoice> backward_choices;
  std::vector<std::pair<StepType, KernelSpec>> backward_per_step;  // what backward_choices name
  bool backward_ran = false;  // an uncaptured backward completed its set-up
  // One device per rank (each rank enqueues on its own stream), one position table for all.
  std::vector<std::unique_ptr<gpu::GpuDevice>> devices;
  std::unique_ptr<RingPositions> positions;
  std::vector<std::unique_ptr<KernelRingBackend>> backends;
  // Loopback.
  std::unique_ptr<gpu::LoopbackRing> loopback;
  std::vector<std::unique_ptr<gpu::Stream>> rank_streams;
  std::vector<std::unique_ptr<gpu::Event>> join_events;
  std::unique_ptr<gpu::Event> fork_event;
#ifdef CPGEN_HAVE_NCCL
  std::unique_ptr<gpu::NcclTransport> nccl;
#endif
  // The last uncaptured forward: its completion event and stream (pending until synchronize).
  std::unique_ptr<gpu::Event> done;
  CUstream done_stream = nullptr;
  bool pending = false;
  // The last forward captured into a graph, for ordering calls inside one capture.
  std::unique_ptr<gpu::Event> captured_done;
  CUstream captured_stream = nullptr;

  // Buffers must outlive the work queued on them: wait for the last forward (errors were or will
  // be reported by synchronize; a destructor has no one to tell).
  ~Impl() {
    if (!pending || !done) return;
    try {
      use_primary_context(device);
#ifdef CPGEN_HAVE_NCCL
      if (nccl) {
        while (cu::driver().cuEventQuery(done->get()) == CUDA_ERROR_NOT_READY) {
          nccl->check();  // throws once the watchdog aborted the ring; its kernels then end
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        return;
      }
#endif
      cu::driver().cuEventSynchronize(done->get());
    } catch (const std::exception&) {
    }
  }

  // exchange_kernels: the transport runs kernels of its own beside the steps (NCCL), so persistent
  // launches leave the SM margin free or, with none, give way to plain ones
  // (place_beside_exchange_kernels).
  void setup(int device, bool exchange_kernels) {
    this->device = device;
    use_primary_context(device);
    arch = options.arch.empty() ? device_arch(device) : options.arch;
    const int sm_margin = ring_sm_margin(options.sm_margin);
    // A margin that leaves the device no SM is refused here, at creation, rather than at the first
    // forward of a persistent step (the same one-line rule and message).
    if (sm_margin >= 0)
      check_sm_margin(sm_margin, device_sm_count(device), "the ring's SM margin (RingOptions::sm_margin or CPGEN_SM_MARGIN)");
    RingKernelSelection selection = select_ring_kernels(problem, options.database_path, arch, device);
    if (exchange_kernels) place_beside_exchange_kernels(selection, sm_margin);
    std::vector<std::pair<StepType, KernelSpec>> per_step;
    for (const auto& [workload, s] : selection.steps) {
      per_step.emplace_back(workload.step, s.spec);
      choices.push_back({std::string(step_type_name(workload.step)), s.spec.uri(), s.source, s.origin, s.reason});
    }
    // The backward's kernels come from the same selection (one database read); they are compiled
    // and loaded on the first backward.
    for (const auto& [workload, s] : selection.backward_steps) {
      backward_per_step.emplace_back(workload.step, s.spec);
      backward_choices.push_back(
          {std::string(step_type_name(workload.step)), s.spec.uri(), s.source, s.origin, s.reason});
    }
    main_source = std::string(config_source_name(choices.front().source));
    kernel = std::make_unique<gpu::StepKernel>(per_step, arch, device, std::max(sm_margin, 0));
    gpu::GpuDevice setup_device(device, *kernel);
    positions = std::make_unique<RingPositions>(problem, setup_device);
    done = std::make_unique<gpu::Event>();
    captured_done = std::make_unique<gpu::Event>();
  }

  // The device and backend of (virtual) rank r.
  void add_rank(int r) {
    devices.push_back(std::make_unique<gpu::GpuDevice>(device, *kernel));
    backends.push_back(std::make_unique<KernelRingBackend>(problem, r, *devices.back(), *positions));
  }

  // The backward kernels, selected in setup with the forward's, compiled and loaded once.
  // A capturing stream must not compile, load or allocate: the first backward runs uncaptured.
  void ensure_backward(bool capturing, const char* fn) {
    if (backward_kernels && backward_ran) return;
    if (capturing)
      throw_bad_input(std::string(fn) + ": the first backward of a ring cannot be captured into a "
                      "CUDA graph (it loads the backward kernels and allocates the dK/dV "
                      "accumulators); run one backward without capture first");
    if (!backward_kernels) {
      gpu::BackwardSpecs specs;
      specs.steps = backward_per_step;
      const int hd = static_cast<int>(problem.head_dim);
      specs.pre = KernelSpec::backward_pre(problem.dtype, hd);
      specs.convert = KernelSpec::backward_convert(problem.dtype, hd);
      backward_kernels = std::make_unique<gpu::BackwardKernels>(specs, arch, device);
      for (auto& d : devices) d->set_backward(backward_kernels.get());
    }
  }

  // Orders a call on `stream` after the previous call, whose work may still be queued on another
  // stream and uses the same buffers. No host synchronization.
  void order_after_previous(CUstream stream, bool capturing) {
    const cu::DriverApi& api = cu::driver();
    if (!capturing) {
      // Work of earlier captures runs when the caller launches the graph, on a stream of the
      // caller's choice; ordering graph launches against other calls is the caller's (header).
      if (pending && done_stream != stream) CPGEN_CU_CHECK(api.cuStreamWaitEvent(stream, done->get(), 0));
      return;
    }
    // A capture cannot wait on an event recorded outside it; if that work is finished no wait is
    // needed, and if it is not the call is refused rather than captured unordered. The query runs
    // in the relaxed capture mode: in the caller's (global or thread-local) mode it would be
    // refused and would invalidate the caller's capture.
    if (pending && done_stream != stream) {
      const CUresult status = gpu::query_event_outside_capture(done->get());
      if (status == CUDA_ERROR_NOT_READY)
        throw_bad_input("RingAttention::forward: capturing a forward on one stream while the previous "
                        "forward, on another stream, may still run; call synchronize() first or "
                        "capture on the stream of the previous call");
      if (status != CUDA_SUCCESS) CPGEN_CU_CHECK(status);
    }
    // Inside one capture, a call on a second stream waits for the previous captured call (a wait
    // on an event of the same capture is a graph edge). A capture that has ended needs no wait.
    if (captured_stream && captured_stream != stream) {
      CUstreamCaptureStatus other = CU_STREAM_CAPTURE_STATUS_NONE;
      if (api.cuStreamIsCapturing(captured_stream, &other) == CUDA_SUCCESS &&
          other == CU_STREAM_CAPTURE_STATUS_ACTIVE)
        CPGEN_CU_CHECK(api.cuStreamWaitEvent(stream, captured_done->get(), 0));
    }
  }

  // Marks the end of a call on `stream` for the next call and for synchronize().
  void record_done(CUstream stream, bool capturing) {
    if (capturing) {
      captured_done->record(stream);
      captured_stream = stream;
      return;
    }
    done->record(stream);
    done_stream = stream;
    pending = true;
  }

  // Every virtual rank's ring from this thread: `bind(r)` binds rank r's tensors, `run` drives
  // the ring (ring_forward_all or ring_backward_all). `shards` is the caller's count.
  void run_loopback(size_t shards, CUstream stream, bool backward, const std::function<void(int)>& bind,
                    const std::function<void(std::span<RingBackend* const>, std::span<Transport* const>)>& run) {
    const char* fn = backward ? "RingAttention::backward_all" : "RingAttention::forward_all";
    const int n = static_cast<int>(problem.cp_size);
    if (static_cast<int>(shards) != n)
      throw_bad_input(std::string(fn) + ": got " + std::to_string(shards) + " shards for cp_size " +
                      std::to_string(n));
    use_primary_context(device);
    const cu::DriverApi& api = cu::driver();
    const bool capturing = gpu::is_capturing(stream);
    if (backward) ensure_backward(capturing, fn);
    // The ring's events (streams, fork and join events, the exchanges' events) exist after the
    // first run; a captured run may reuse them but not create them.
    if (capturing && n > 1 && loopback->spare_exchanges() == 0)
      throw_bad_input(std::string(fn) + ": the first " + (backward ? "backward" : "forward") +
                      " of a loopback ring cannot be captured into a CUDA graph (it creates the "
                      "ring's CUDA events); run one without capture first");
    // Every rank's tensors are checked before the fork: a rank stream that waited on the fork
    // event of a capture has joined that capture, and a bad tensor of a later rank would leave it
    // there, unjoined, failing the caller's cuStreamEndCapture instead of this call alone.
    for (int r = 0; r < n; ++r) bind(r);
    order_after_previous(stream, capturing);
    fork_event->record(stream);
    loopback->reset();
    std::vector<RingBackend*> rank_backends;
    std::vector<Transport*> endpoints;
    for (int r = 0; r < n; ++r) {
      CUstream rs = rank_streams[r]->get();
      CPGEN_CU_CHECK(api.cuStreamWaitEvent(rs, fork_event->get(), 0));
      loopback->set_compute_stream(r, rs);
      devices[r]->set_stream(rs);
      rank_backends.push_back(backends[r].get());
      endpoints.push_back(&loopback->endpoint(r));
    }
    std::exception_ptr error;
    try {
      run(rank_backends, endpoints);
    } catch (const std::exception&) {
      error = std::current_exception();
    }
    // Join every rank's stream back into the caller's, also after a failure, so that nothing
    // queued keeps running unseen: after a failure also the communication streams, whose copies
    // for exchanges nobody finished no rank stream waits for (a failed capture is discarded).
    for (int r = 0; r < n; ++r) {
      join_events[r]->record(rank_streams[r]->get());
      CPGEN_CU_CHECK(api.cuStreamWaitEvent(stream, join_events[r]->get(), 0));
    }
    if (error && !capturing) loopback->order_after_copies(stream);
    record_done(stream, capturing);
    if (error) std::rethrow_exception(error);
    if (backward && !capturing) backward_ran = true;
  }

#ifdef CPGEN_HAVE_NCCL
  // One NCCL rank's call, then its completion event recorded, also where the call failed: work it
  // queued before the failure (the preprocessing, copies, a step) is what the next call on
  // another stream must wait for, and a call that failed before its first exchange leaves the
  // ring usable. Before, a failed call left the previous call's event standing.
  template <typename Body>
  void run_nccl_call(const char* what, CUstream stream, bool capturing, Body&& body) {
    try {
      nccl->run_call(what, body);
    } catch (...) {
      try {
        record_done(stream, capturing);
      } catch (...) {
        // The call's own error says more than a failed record after it (a context gone bad).
      }
      throw;
    }
    record_done(stream, capturing);
  }
#endif

  void run_loopback_forward(std::span<const ShardPointers> ranks, CUstream stream) {
    run_loopback(
        ranks.size(), stream, false,
        [&](int r) {
          const ShardPointers& s = ranks[r];
          backends[r]->bind({s.q, s.k, s.v, s.out, s.lse, nullptr, nullptr, nullptr, nullptr, s.strides});
        },
        [](std::span<RingBackend* const> b, std::span<Transport* const> t) { ring_forward_all(b, t); });
  }

  void run_loopback_backward(std::span<const BackwardShardPointers> ranks, CUstream stream) {
    run_loopback(
        ranks.size(), stream, true,
        [&](int r) { backends[r]->bind_backward(backward_tensors(ranks[r])); },
        [](std::span<RingBackend* const> b, std::span<Transport* const> t) { ring_backward_all(b, t); });
  }

  // The backend reads out and lse in the backward (ShardTensors holds them as writable for the
  // forward); the backward kernels never write them.
  static ShardTensors backward_tensors(const BackwardShardPointers& s) {
    return {s.q, s.k, s.v, const_cast<void*>(s.out), const_cast<float*>(s.lse), s.dout, s.dq, s.dk, s.dv, s.strides};
  }
};

RingAttention::RingAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RingAttention::RingAttention(RingAttention&&) noexcept = default;
RingAttention& RingAttention::operator=(RingAttention&& other) noexcept {
  const CallerContextGuard keep;  // freeing the old ring's buffers sets its device's context
  impl_ = std::move(other.impl_);
  return *this;
}
RingAttention::~RingAttention() {
  if (!impl_) return;  // moved from
  const CallerContextGuard keep;
  impl_.reset();
}

RingAttention RingAttention::loopback(const Problem& problem, const RingOptions& options) {
  const CallerContextGuard keep;  // the caller's current context, back on return
  problem.validate();
  check_kernel_ring_problem(problem);  // what the kernels run today, before the device
  if (options.device < -1)
    throw_bad_input("RingAttention::loopback: device " + std::to_string(options.device) +
                    " is not a device ordinal; allowed: -1 (device 0) or 0 and up");
  auto impl = std::make_unique<Impl>();
  impl->problem = problem;
  impl->options = options;
  impl->setup(options.device == -1 ? 0 : options.device, /*exchange_kernels=*/false);
  const int n = static_cast<int>(problem.cp_size);
  impl->loopback = std::make_unique<gpu::LoopbackRing>(n);
  impl->fork_event = std::make_unique<gpu::Event>();
  for (int r = 0; r < n; ++r) {
    impl->add_rank(r);
    impl->rank_streams.push_back(std::make_unique<gpu::Stream>());
    impl->join_events.push_back(std::make_unique<gpu::Event>());
  }
  return RingAttention(std::move(impl));
}

RingAttention RingAttention::nccl(const Problem& problem, void* nccl_comm, const RingOptions& options) {
  const CallerContextGuard keep;
  problem.validate();
  check_kernel_ring_problem(problem);  // what the kernels run today, before the device
#ifdef CPGEN_HAVE_NCCL
  if (!nccl_comm) throw_bad_input("RingAttention::nccl: the communicator is null");
  // 0 or less aborted the ring at the first exchange still in flight; NaN never aborted it.
  if (!(options.watchdog_seconds > 0) || !std::isfinite(options.watchdog_seconds))
    throw_bad_input("RingAttention::nccl: watchdog_seconds " + std::to_string(options.watchdog_seconds) +
                    " is not allowed; allowed: a finite number of seconds > 0");
  auto comm = static_cast<ncclComm_t>(nccl_comm);
  auto impl = std::make_unique<Impl>();
  impl->problem = problem;
  impl->options = options;
  // The transport's communicator split (collective) first, then this rank's own set-up (kernel
  // selection and compiles, which can fail on one rank alone): the other way round, a rank that
  // failed its set-up left the others blocked in the split, with no watchdog yet; now they meet
  // the watchdog at their first exchange.
  const int device = gpu::NcclTransport::device_of(comm);
  impl->nccl = std::make_unique<gpu::NcclTransport>(comm, use_primary_context(device), options.watchdog_seconds);
  if (impl->nccl->size() != problem.cp_size)
    throw_bad_input("RingAttention::nccl: the communicator has " + std::to_string(impl->nccl->size()) +
                    " ranks but cp_size is " + std::to_string(problem.cp_size));
  impl->setup(device, /*exchange_kernels=*/true);
  impl->rank = impl->nccl->rank();
  impl->add_rank(impl->rank);
  return RingAttention(std::move(impl));
#else
  (void)nccl_comm;
  (void)options;
  throw Error(ErrorKind::kNccl, "RingAttention::nccl: cpgen was built without NCCL; install NCCL "
                                "(or the nvidia-nccl Python package) and rebuild");
#endif
}

void RingAttention::forward(const void* q, const void* k, const void* v, void* out, float* lse,
                            void* stream, const ShardStrides* strides) {
  const CallerContextGuard keep;
  Impl& m = *impl_;
  auto cu_stream = static_cast<CUstream>(stream);
  if (m.loopback) {
    if (m.problem.cp_size != 1)
      throw_bad_input("RingAttention::forward: a loopback ring of cp_size " +
                      std::to_string(m.problem.cp_size) +
                      " holds every rank; call forward_all with one shard per virtual rank");
    const ShardPointers shard{q, k, v, out, lse, strides};
    m.run_loopback_forward({&shard, 1}, cu_stream);
    return;
  }
#ifdef CPGEN_HAVE_NCCL
  use_primary_context(m.device);
  m.nccl->check();
  const bool capturing = gpu::is_capturing(cu_stream);
  m.order_after_previous(cu_stream, capturing);
  m.devices[0]->set_stream(cu_stream);
  m.backends[0]->bind({q, k, v, out, lse, nullptr, nullptr, nullptr, nullptr, strides});
  m.nccl->set_compute_stream(cu_stream);
  m.run_nccl_call("forward", cu_stream, capturing, [&] { ring_forward(*m.backends[0], *m.nccl); });
#else
  throw Error(ErrorKind::kInternal, "RingAttention: no transport");
#endif
}

void RingAttention::forward_all(std::span<const ShardPointers> ranks, void* stream) {
  const CallerContextGuard keep;
  if (!impl_->loopback)
    throw_bad_input("RingAttention::forward_all is for loopback rings; an NCCL rank calls forward "
                    "with its own shard");
  impl_->run_loopback_forward(ranks, static_cast<CUstream>(stream));
}

void RingAttention::backward(const void* q, const void* k, const void* v, const void* out, const float* lse,
                             const void* dout, void* dq, void* dk, void* dv, void* stream,
                             const ShardStrides* strides) {
  const CallerContextGuard keep;
  Impl& m = *impl_;
  auto cu_stream = static_cast<CUstream>(stream);
  const BackwardShardPointers shard{q, k, v, out, lse, dout, dq, dk, dv, strides};
  if (m.loopback) {
    if (m.problem.cp_size != 1)
      throw_bad_input("RingAttention::backward: a loopback ring of cp_size " +
                      std::to_string(m.problem.cp_size) +
                      " holds every rank; call backward_all with one shard per virtual rank");
    m.run_loopback_backward({&shard, 1}, cu_stream);
    return;
  }
#ifdef CPGEN_HAVE_NCCL
  use_primary_context(m.device);
  m.nccl->check();
  const bool capturing = gpu::is_capturing(cu_stream);
  m.ensure_backward(capturing, "RingAttention::backward");
  m.order_after_previous(cu_stream, capturing);
  m.devices[0]->set_stream(cu_stream);
  m.backends[0]->bind_backward(Impl::backward_tensors(shard));
  m.nccl->set_compute_stream(cu_stream);
  m.run_nccl_call("backward", cu_stream, capturing, [&] { ring_backward(*m.backends[0], *m.nccl); });
  if (!capturing) m.backward_ran = true;
#else
  throw Error(ErrorKind::kInternal, "RingAttention: no transport");
#endif
}

void RingAttention::backward_all(std::span<const BackwardShardPointers> ranks, void* stream) {
  const CallerContextGuard keep;
  if (!impl_->loopback)
    throw_bad_input("RingAttention::backward_all is for loopback rings; an NCCL rank calls backward "
                    "with its own shard");
  impl_->run_loopback_backward(ranks, static_cast<CUstream>(stream));
}

void RingAttention::synchronize() {
  const CallerContextGuard keep;
  Impl& m = *impl_;
  if (!m.pending) return;
  use_primary_context(m.device);
  const cu::DriverApi& api = cu::driver();
#ifdef CPGEN_HAVE_NCCL
  if (m.nccl) {
    // Poll rather than block, so that a stalled peer surfaces as the watchdog's error.
    m.nccl->wait_idle();
    while (true) {
      m.nccl->check();
      CUresult status = api.cuEventQuery(m.done->get());
      if (status == CUDA_SUCCESS) break;
      if (status != CUDA_ERROR_NOT_READY) CPGEN_CU_CHECK(status);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    m.pending = false;
    return;
  }
#endif
  CPGEN_CU_CHECK(api.cuEventSynchronize(m.done->get()));
  m.pending = false;
}

const Problem& RingAttention::problem() const { return impl_->problem; }
int64_t RingAttention::local_rows(int rank) const {
  if (rank < 0 || rank >= impl_->problem.cp_size)
    throw_bad_input("RingAttention::local_rows: rank " + std::to_string(rank) + " is outside [0, cp_size " +
                    std::to_string(impl_->problem.cp_size) + ")");
  return impl_->positions->rank_len(rank);
}
int RingAttention::rank() const { return impl_->rank; }
int RingAttention::device() const { return impl_->device; }
const std::string& RingAttention::kernel_uri() const { return impl_->choices.front().kernel_uri; }
const std::string& RingAttention::config_source() const { return impl_->main_source; }
const std::string& RingAttention::config_reason() const { return impl_->choices.front().reason; }
const std::vector<StepKernelChoice>& RingAttention::step_kernels() const { return impl_->choices; }
const std::vector<StepKernelChoice>& RingAttention::backward_step_kernels() const {
  return impl_->backward_choices;
}

}  // namespace cpgen
