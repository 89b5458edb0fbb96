// The NCCL transport's watchdog on the stand-in driver and NCCL of standin_cuda.cpp (no GPU):
// runs the real NcclTransport and ring_forward with a stub backend whose steps are GPU work, in
// one of three situations the watchdog once got wrong, and exits 0 when no false alarm and no
// hang came of it (1 with the reason otherwise):
//   runahead  back-to-back forwards for 2.5 s without a synchronize, the host a bounded queue
//             ahead of the GPU, watchdog 1 s: no stall may be reported (each exchange's watch
//             followed per-id events that the next call recorded again, and aborted the ring)
//   capture   an uncaptured forward still running when a captured one starts, the capture in
//             the global mode (PyTorch's default): no error (the captured call recorded the
//             watched events inside the capture; and in the global mode another thread's
//             capture forbids the watchdog's queries unless it left that mode)
//   sendfail  a forward whose ncclSend fails throws, and the synchronize after it returns at once
//             (the failed exchange's watch held it for the whole timeout, then aborted the ring)
//   stall     (run with FAKE_QMAX=5 FAKE_NCCL_SIZE=4) the first send of the second forward never
//             ends while the host keeps issuing forwards until its launch queue is full: the
//             watchdog aborts within a few seconds and the error names ring step 0 (a record
//             made while holding the watchdog's lock blocked on the full queue, so the abort never
//             came; and a later exchange, issued before the stalled one was reached, timed out
//             first and was named instead)
//   callfail  ring calls through NcclTransport::run_call that throw: before their first exchange
//             (the ring stays usable: a later forward runs) and at their first step (the
//             communicator is aborted at once, the error names the cause, and synchronize fails
//             at once instead of waiting for the watchdog: the peers wait on this rank)
//   capfail   calls through run_call that fail while capturing leave the ring usable: the first
//             forward captured (refused before any exchange reached NCCL), and a captured
//             forward failing at its first step (its exchanges only entered the graph); an
//             uncaptured forward after each runs and synchronizes
//   query     gpu::query_event_outside_capture from a thread capturing in the global mode: it
//             answers and the capture survives (a plain cuEventQuery is refused, 900, and
//             invalidates the capture; the probe checks the stand-in does so), and the thread's
//             capture mode is the same after it
//   commctx   nccl_comm_init on device 0 from a thread whose current context is device 1's, then
//             the C ABI's cpgen_nccl_unique_id and cpgen_nccl_comm_init_rank: both make a
//             communicator, and that context is current again on return (it was left on device 0's)
//   devarch   cpgen_device_arch (the C API) on the stand-in: "sm_90a" for its compute capability
//             9.0; with FAKE_DEVICES=0, CPGEN_ERR_NO_DEVICE (a device the driver does not see
//             is not bad input)
// Leaves through _Exit: the stand-in's GPU thread runs until the process ends.
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "cpgen/cpgen_c.h"
#include "cpgen/error.h"
#include "cpgen/nccl_bootstrap.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/gpu_stream.h"
#include "runtime/ring/ring_driver.h"
#include "runtime/transport/nccl_transport.h"

using namespace cpgen;
using Clock = std::chrono::steady_clock;

namespace {

int (*gpu_work)(void*, long) = nullptr;
long step_us = 2000;

// A ring backend whose forward step is GPU work on the compute stream.
struct StubBackend : RingBackend {
  CUstream stream = nullptr;
  char k[2][64], v[2][64], dk[2][64], dv[2][64];
  bool fail_begin = false, fail_step = false;  // throw from forward_begin, from the first forward_step
  std::vector<BufferView> kv_buffers(int i) override { return {{k[i], 64}, {v[i], 64}}; }
  std::vector<BufferView> dkv_buffers(int i) override { return {{dk[i], 64}, {dv[i], 64}}; }
  void forward_begin() override {
    if (fail_begin) throw Error(ErrorKind::kBadInput, "stand-in bad input");
  }
  void forward_step(const RingStep&) override {
    if (fail_step) throw Error(ErrorKind::kCuda, "stand-in launch failure");
    gpu_work(stream, step_us);
  }
  void backward_begin() override {}
  void backward_step(const RingStep&) override {}
  void accumulate_dkv(int, bool) override { gpu_work(stream, step_us); }
  void backward_end(int) override {}
};

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

[[noreturn]] void leave(int code, const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  std::_Exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) leave(2, "usage: watchdog_probe runahead|capture|sendfail|stall|callfail|capfail|query|devarch|commctx");
  const std::string mode = argv[1];
  void* driver = dlopen("libcuda.so.1", RTLD_NOW);
  gpu_work = driver ? reinterpret_cast<int (*)(void*, long)>(dlsym(driver, "fake_work")) : nullptr;
  int* fail_send = driver ? static_cast<int*>(dlsym(driver, "fake_fail_next_send")) : nullptr;
  int* stall_send = driver ? static_cast<int*>(dlsym(driver, "fake_stall_next_send")) : nullptr;
  int* aborts = driver ? static_cast<int*>(dlsym(driver, "fake_aborts")) : nullptr;
  if (!gpu_work || !fail_send || !stall_send || !aborts) leave(1, "not the stand-in driver (LD_LIBRARY_PATH?)");
  if (mode == "commctx") {
    // The caller's context (device 1's) is current before and after a communicator is made on
    // device 0 (run with FAKE_DEVICES=2).
    try {
      const cu::DriverApi& api = cu::driver();
      CUdevice one = 0;
      CUcontext mine = nullptr, after = nullptr;
      CPGEN_CU_CHECK(api.cuDeviceGet(&one, 1));
      CPGEN_CU_CHECK(api.cuDevicePrimaryCtxRetain(&mine, one));
      CPGEN_CU_CHECK(api.cuCtxSetCurrent(mine));
      void* comm = nccl_comm_init(nccl_unique_id(), 0, 1, 0);
      CPGEN_CU_CHECK(api.cuCtxGetCurrent(&after));
      nccl_comm_destroy(comm);
      if (after != mine) leave(1, "commctx: the context changed");
      // The same through the C ABI's unique-id bootstrap.
      unsigned char id[CPGEN_NCCL_UNIQUE_ID_BYTES];
      void* c_comm = nullptr;
      if (cpgen_nccl_unique_id(id, sizeof id) != CPGEN_OK ||
          cpgen_nccl_comm_init_rank(id, sizeof id, 0, 1, 0, &c_comm) != CPGEN_OK || !c_comm)
        leave(1, std::string("commctx: the C ABI bootstrap failed: ") + cpgen_last_error());
      CPGEN_CU_CHECK(api.cuCtxGetCurrent(&after));
      if (cpgen_nccl_comm_destroy(c_comm) != CPGEN_OK) leave(1, std::string("commctx: ") + cpgen_last_error());
      leave(after == mine ? 0 : 1, std::string("commctx: ") +
                                       (after == mine ? "the caller's context is current again" : "the context changed (C ABI)"));
    } catch (const std::exception& e) {
      leave(1, std::string("commctx: ") + e.what());
    }
  }
  if (mode == "devarch") {
    char arch[16] = "";
    const cpgen_status status = cpgen_device_arch(0, arch, sizeof arch);
    leave(0, "devarch: " + std::to_string(status) + " " + arch + " " + cpgen_last_error());
  }
  try {
    cu::driver();
    gpu::NcclTransport transport(reinterpret_cast<ncclComm_t>(0x1), nullptr, mode == "capture" ? 30.0 : 1.0);
    gpu::Stream stream;
    StubBackend backend;
    backend.stream = stream.get();
    transport.set_compute_stream(stream.get());
    const Clock::time_point t0 = Clock::now();
    if (mode == "runahead") {
      long calls = 0;
      while (since(t0) < 2.5) {
        ring_forward(backend, transport);
        ++calls;
      }
      transport.wait_idle();
      if (*aborts != 0) leave(1, "runahead: the communicator was aborted");
      leave(0, "runahead: " + std::to_string(calls) + " forwards, no stall");
    } else if (mode == "capture") {
      step_us = 50000;  // the uncaptured forward still runs when the capture starts
      ring_forward(backend, transport);
      const cu::DriverApi& api = cu::driver();
      CPGEN_CU_CHECK(api.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL));
      ring_forward(backend, transport);
      CUgraph graph = nullptr;
      CPGEN_CU_CHECK(api.cuStreamEndCapture(stream.get(), &graph));
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      transport.check();
      if (*aborts != 0) leave(1, "capture: the communicator was aborted");
      leave(0, "capture: no error");
    } else if (mode == "sendfail") {
      ring_forward(backend, transport);
      transport.wait_idle();
      *fail_send = 1;
      bool threw = false;
      try {
        ring_forward(backend, transport);
      } catch (const Error&) {
        threw = true;
      }
      if (!threw) leave(1, "sendfail: the failed send did not throw");
      const Clock::time_point t1 = Clock::now();
      transport.wait_idle();
      const double waited = since(t1);
      if (waited > 0.5 || *aborts != 0) leave(1, "sendfail: the synchronize after the failure waited " + std::to_string(waited) + " s");
      leave(0, "sendfail: synchronize returned at once");
    } else if (mode == "callfail") {
      auto failing = [&](const char* which) {
        try {
          transport.run_call("forward", [&] { ring_forward(backend, transport); });
        } catch (const Error& e) {
          return std::string(e.what());
        }
        leave(1, std::string("callfail: the ") + which + " failure did not throw");
      };
      backend.fail_begin = true;
      const std::string before = failing("bad-input");
      backend.fail_begin = false;
      if (before.find("stand-in bad input") == std::string::npos) leave(1, "callfail: rethrew " + before);
      if (*aborts != 0) leave(1, "callfail: a failure before any exchange aborted the ring");
      transport.run_call("forward", [&] { ring_forward(backend, transport); });
      transport.wait_idle();
      backend.fail_step = true;
      const std::string during = failing("step");
      if (during.find("stand-in launch failure") == std::string::npos) leave(1, "callfail: rethrew " + during);
      if (*aborts != 1) leave(1, "callfail: " + std::to_string(*aborts) + " aborts after a failed step");
      const Clock::time_point t1 = Clock::now();
      std::string after;
      try {
        transport.wait_idle();
      } catch (const Error& e) {
        after = e.what();
      }
      if (since(t1) > 0.5) leave(1, "callfail: synchronize took " + std::to_string(since(t1)) + " s");
      if (after.find("a forward failed after its exchanges began") == std::string::npos ||
          after.find("stand-in launch failure") == std::string::npos)
        leave(1, "callfail: synchronize said: " + after);
      leave(0, "callfail: aborted at once, " + after);
    } else if (mode == "capfail") {
      const cu::DriverApi& api = cu::driver();
      auto captured_failure = [&](const char* which, bool fail_step) {
        CUgraph graph = nullptr;
        CPGEN_CU_CHECK(api.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL));
        std::string error;
        backend.fail_step = fail_step;
        try {
          transport.run_call("forward", [&] { ring_forward(backend, transport); });
        } catch (const Error& e) {
          error = e.what();
        }
        backend.fail_step = false;
        api.cuStreamEndCapture(stream.get(), &graph);  // the failed capture is discarded
        if (error.empty()) leave(1, std::string("capfail: the ") + which + " did not throw");
        if (*aborts != 0) leave(1, std::string("capfail: the ") + which + " aborted the ring: " + error);
        transport.run_call("forward", [&] { ring_forward(backend, transport); });
        transport.wait_idle();
        return error;
      };
      const std::string first = captured_failure("first forward captured", false);
      if (first.find("cannot be captured") == std::string::npos) leave(1, "capfail: the first capture said: " + first);
      const std::string step = captured_failure("captured forward failing at its first step", true);
      leave(0, "capfail: both failures left the ring usable (" + step + ")");
    } else if (mode == "query") {
      const cu::DriverApi& api = cu::driver();
      gpu::Stream other;
      gpu::Event event;
      gpu_work(other.get(), 200000);
      event.record(other.get());
      CUgraph graph = nullptr;
      CPGEN_CU_CHECK(api.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL));
      const CUresult helper = gpu::query_event_outside_capture(event.get());
      const CUresult ended = api.cuStreamEndCapture(stream.get(), &graph);
      CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_RELAXED;
      CPGEN_CU_CHECK(api.cuThreadExchangeStreamCaptureMode(&thread_mode));
      if (helper != CUDA_ERROR_NOT_READY || ended != CUDA_SUCCESS || thread_mode != CU_STREAM_CAPTURE_MODE_GLOBAL)
        leave(1, "query: the helper answered " + cu::describe(helper) + ", the capture ended with " +
                     cu::describe(ended) + ", the thread's mode is " + std::to_string(thread_mode));
      CPGEN_CU_CHECK(api.cuThreadExchangeStreamCaptureMode(&thread_mode));  // back to global
      CPGEN_CU_CHECK(api.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL));
      const CUresult plain = api.cuEventQuery(event.get());
      const CUresult plain_ended = api.cuStreamEndCapture(stream.get(), &graph);
      if (plain != CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED || plain_ended != CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
        leave(1, "query: the stand-in let a plain query through (" + cu::describe(plain) + ", " +
                     cu::describe(plain_ended) + ")");
      leave(0, "query: answered not ready, the capture survived");
    } else if (mode == "stall") {
      ring_forward(backend, transport);
      transport.wait_idle();
      *stall_send = 1;
      std::string error;
      try {
        while (since(t0) < 20) ring_forward(backend, transport);
      } catch (const Error& e) {
        error = e.what();
      }
      const double when = since(t0);
      if (error.empty()) leave(1, "stall: no error after 20 s");
      if (*aborts != 1) leave(1, "stall: " + std::to_string(*aborts) + " aborts: " + error);
      if (when > 10) leave(1, "stall: the error came after " + std::to_string(when) + " s: " + error);
      if (error.find("ring step 0:") == std::string::npos) leave(1, "stall: not ring step 0: " + error);
      leave(0, "stall: aborted, " + error);
    }
    leave(2, "unknown mode " + mode);
  } catch (const std::exception& e) {
    leave(1, mode + ": " + e.what());
  }
}
