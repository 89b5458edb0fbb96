// A stand-in CUDA driver and NCCL in one library (built as libcuda.so.1 in a folder of its own and
// named by CPGEN_NCCL_LIBRARY too), for the NCCL transport's watchdog tests without a GPU
// (tests/runtime/transport/nccl_watchdog_test.cpp, through watchdog_probe.cpp). Streams are FIFO
// queues that one "GPU" thread runs in a random order across streams; an event completes when the
// GPU reaches its record; the launch queue is bounded (FAKE_QMAX, default 64), so the host can run
// ahead of the GPU as far as a real driver lets it, and blocks beyond; capture follows the CUDA
// rules the transport relies on: a record on a capturing stream makes the event a captured one,
// which cuEventQuery answers with CUDA_ERROR_CAPTURED_EVENT (907), and a stream that waits on a
// captured event joins the capture. FAKE_DEVICES devices (default 1), of compute capability 9.0.
// The capture modes (CUDA driver API, cuStreamBeginCapture and
// cuThreadExchangeStreamCaptureMode): cuEventQuery is one of the calls they forbid; from a thread
// in the relaxed mode it is allowed, else it is forbidden while the thread's own capture (begun in
// the global or thread-local mode) is active, and, for a thread in the global mode (every thread's
// default), while another thread's global-mode capture is; a forbidden query answers
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900) and invalidates those captures, whose
// cuStreamEndCapture then fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901). ncclSend takes FAKE_XFER_US microseconds of GPU time on its
// stream; fake_fail_next_send makes the next one fail with ncclInvalidArgument, and
// fake_stall_next_send makes the next one's transfer never end until ncclCommAbort.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <atomic>
#include <functional>
#include <random>
#include <vector>
#include <algorithm>
using namespace std::chrono;
namespace {
struct Capture { std::thread::id thread; int mode = 0; bool invalidated = false; };  // mode: 0 global, 1 thread-local, 2 relaxed
struct Ev { unsigned long long recorded = 0, done = 0; bool captured = false; Capture* capture = nullptr; };
struct Op { int kind; long us; Ev* ev; unsigned long long seq; std::function<void()> fn; };  // 0 work, 1 record, 2 wait, 3 fn
struct St { std::deque<Op> q; bool capturing = false; int cap = 0; Capture* capture = nullptr; };
std::atomic<bool> aborted{false};  // ncclCommAbort ran: a stalled transfer ends
std::mutex mu; std::condition_variable cv;
std::set<St*> streams; St legacy;
unsigned long long seqc = 0; int capc = 0;
size_t qmax() { const char* e = getenv("FAKE_QMAX"); return e ? atoi(e) : 64; }
St* S(void* s) { return (s == nullptr || s == (void*)1 || s == (void*)2) ? &legacy : (St*)s; }
std::once_flag gpu_once;
void gpu() {
  std::unique_lock<std::mutex> l(mu);
  for (;;) {
    bool progressed = false;
    std::vector<St*> all(streams.begin(), streams.end()); all.push_back(&legacy);
    static std::mt19937 rng(getenv("FAKE_SEED") ? atoi(getenv("FAKE_SEED")) : 1);
    std::shuffle(all.begin(), all.end(), rng);
    for (St* s : all) {
      if (s->q.empty()) continue;
      Op op = s->q.front();
      if (op.kind == 2 && op.ev->done < op.seq) continue;
      if (op.kind == 0) { l.unlock(); std::this_thread::sleep_for(microseconds(op.us)); l.lock(); }
      if (op.kind == 3) { l.unlock(); op.fn(); l.lock(); }
      if (op.kind == 4) cv.wait(l, [] { return aborted.load(); });  // a stalled transfer: until the abort
      if (op.kind == 1 && op.ev->done < op.seq) op.ev->done = op.seq;
      s->q.pop_front(); progressed = true; cv.notify_all(); break;
    }
    if (!progressed) cv.wait_for(l, milliseconds(1));
  }
}
thread_local int thread_mode = 0;  // the thread's capture interaction mode: global by default
// Whether a call the capture modes forbid is forbidden to this thread now (under mu); if so the
// captures it would disturb are invalidated.
bool forbidden_now() {
  if (thread_mode == 2) return false;
  std::vector<St*> all(streams.begin(), streams.end()); all.push_back(&legacy);
  bool forbidden = false;
  for (St* s : all) {
    if (!s->capturing || !s->capture) continue;
    Capture* c = s->capture;
    const bool own = c->thread == std::this_thread::get_id() && c->mode != 2;
    const bool others_global = thread_mode == 0 && c->thread != std::this_thread::get_id() && c->mode == 0;
    if (own || others_global) { c->invalidated = true; forbidden = true; }
  }
  return forbidden;
}
void start_gpu() { std::call_once(gpu_once, [] { std::thread(gpu).detach(); }); }
void push(St* s, Op op, std::unique_lock<std::mutex>& l) {
  if (s->capturing) return;  // captured: becomes a graph node, not run now
  cv.wait(l, [&] { return s->q.size() < qmax(); });  // the launch queue is bounded: the host blocks
  s->q.push_back(op); cv.notify_all();
}
}  // namespace
__attribute__((visibility("default"))) void fake_fn(void* stream, std::function<void()> fn) { start_gpu(); std::unique_lock<std::mutex> l(mu); push(S(stream), {3, 0, nullptr, 0, std::move(fn)}, l); }
extern "C" {
int fake_work(void* stream, long us) { start_gpu(); std::unique_lock<std::mutex> l(mu); push(S(stream), {0, us, nullptr, 0}, l); return 0; }
int cuInit(unsigned) { start_gpu(); return 0; }
int cuDriverGetVersion(int* v) { *v = 13000; return 0; }
int cuGetErrorName(int e, const char** s) {
  *s = e == 907 ? "CUDA_ERROR_CAPTURED_EVENT" : e == 600 ? "CUDA_ERROR_NOT_READY"
     : e == 900 ? "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED" : e == 901 ? "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED" : "CUDA_ERROR_OTHER";
  return 0;
}
int cuThreadExchangeStreamCaptureMode(int* mode) { std::swap(*mode, thread_mode); return 0; }
int cuGetErrorString(int e, const char** s) { return cuGetErrorName(e, s); }
int cuDeviceGetCount(int* c) { const char* e = getenv("FAKE_DEVICES"); *c = e ? atoi(e) : 1; return 0; }
int cuDeviceGet(int* d, int o) { *d = o; return 0; }
int cuDeviceGetName(char* n, int len, int) { snprintf(n, len, "FakeGPU"); return 0; }
// Compute capability 9.0 (attributes 75 and 76: an H100's or H200's), 132 of everything else.
int cuDeviceGetAttribute(int* v, int attribute, int) { *v = attribute == 75 ? 9 : attribute == 76 ? 0 : 132; return 0; }
// Device d's primary context is the address 0x1000 + 0x100 d (one per device, so a test can tell
// whose context is current).
int cuDevicePrimaryCtxRetain(void** c, int d) { *c = (void*)(uintptr_t)(0x1000 + 0x100 * d); return 0; }
int cuDevicePrimaryCtxRelease_v2(int) { return 0; }
static thread_local void* cur = nullptr;
int cuCtxSetCurrent(void* c) { cur = c; return 0; }
int cuCtxGetCurrent(void** c) { *c = cur; return 0; }
int cuCtxGetDevice(int* d) { *d = cur ? static_cast<int>(((uintptr_t)cur - 0x1000) / 0x100) : 0; return 0; }
int cuCtxSynchronize() { return 0; }
int cuModuleLoadData(void**, const void*) { return 1; }
int cuModuleUnload(void*) { return 0; }
int cuModuleGetFunction(void**, void*, const char*) { return 1; }
int cuFuncSetAttribute(void*, int, int) { return 0; }
int cuFuncGetAttribute(int* v, int, void*) { *v = 0; return 0; }
int cuOccupancyMaxActiveBlocksPerMultiprocessor(int* v, void*, int, size_t) { *v = 1; return 0; }
int cuLaunchKernel(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void* s, void**, void**) { return fake_work(s, 100); }
int cuMemAlloc_v2(unsigned long long* p, size_t b) { *p = (unsigned long long)malloc(b ? b : 1); return 0; }
int cuMemFree_v2(unsigned long long p) { free((void*)p); return 0; }
int cuMemcpyHtoD_v2(unsigned long long d, const void* h, size_t b) { memcpy((void*)d, h, b); return 0; }
int cuMemcpyDtoH_v2(void* h, unsigned long long d, size_t b) { memcpy(h, (void*)d, b); return 0; }
int cuMemcpyDtoD_v2(unsigned long long, unsigned long long, size_t) { return 0; }
int cuMemcpyHtoDAsync_v2(unsigned long long, const void*, size_t, void* s) { return fake_work(s, 10); }
int cuMemcpyDtoHAsync_v2(void*, unsigned long long, size_t, void* s) { return fake_work(s, 10); }
int cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s_, size_t b, void* s) { fake_fn(s, [=] { memcpy((void*)d, (const void*)s_, b); }); return 0; }
int cuMemsetD8_v2(unsigned long long, unsigned char, size_t) { return 0; }
int cuMemsetD8Async(unsigned long long, unsigned char, size_t, void* s) { return fake_work(s, 10); }
int cuMemsetD32Async(unsigned long long, unsigned, size_t, void* s) { return fake_work(s, 10); }
int cuMemGetInfo_v2(size_t* f, size_t* t) { *f = *t = 1ull << 36; return 0; }
int cuStreamCreate(void** s, unsigned) { std::lock_guard<std::mutex> l(mu); St* n = new St; streams.insert(n); *s = n; return 0; }
int cuStreamCreateWithPriority(void** s, unsigned f, int) { return cuStreamCreate(s, f); }
int cuCtxGetStreamPriorityRange(int* a, int* b) { *a = 0; *b = -5; return 0; }
int cuStreamDestroy_v2(void*) { return 0; }  // leaked on purpose: the GPU thread may still look at it
int cuStreamSynchronize(void* s) { std::unique_lock<std::mutex> l(mu); cv.wait(l, [&] { return S(s)->q.empty(); }); return 0; }
int cuStreamQuery(void* s) { std::lock_guard<std::mutex> l(mu); return S(s)->q.empty() ? 0 : 600; }
int cuEventCreate(void** e, unsigned) { *e = new Ev; return 0; }
int cuEventDestroy_v2(void*) { return 0; }
int cuEventRecord(void* e, void* s) {
  std::unique_lock<std::mutex> l(mu); Ev* ev = (Ev*)e; St* st = S(s);
  if (st->capturing) { ev->captured = true; ev->capture = st->capture; return 0; }
  ev->captured = false; ev->recorded = ++seqc; push(st, {1, 0, ev, ev->recorded}, l); return 0;
}
int cuEventQuery(void* e) { std::lock_guard<std::mutex> l(mu); Ev* ev = (Ev*)e; if (forbidden_now()) return 900; if (ev->captured) return 907; return ev->done >= ev->recorded ? 0 : 600; }
int cuEventSynchronize(void* e) { std::unique_lock<std::mutex> l(mu); Ev* ev = (Ev*)e; if (ev->captured) return 907; cv.wait(l, [&] { return ev->done >= ev->recorded; }); return 0; }
int cuEventElapsedTime_v2(float* ms, void*, void*) { *ms = 0; return 0; }
int cuStreamWaitEvent(void* s, void* e, unsigned) {
  std::unique_lock<std::mutex> l(mu); Ev* ev = (Ev*)e; St* st = S(s);
  if (ev->captured) { st->capturing = true; st->capture = ev->capture; return 0; }  // joins the capture
  if (getenv("FAKE_DROP_WAITS") && rand() % 3 == 0) return 0;
  push(st, {2, 0, ev, ev->recorded}, l); return 0;
}
int cuStreamIsCapturing(void* s, int* status) {
  std::lock_guard<std::mutex> l(mu); St* st = S(s);
  *status = !st->capturing ? 0 : st->capture && st->capture->invalidated ? 2 : 1; return 0;
}
int cuStreamBeginCapture_v2(void* s, int mode) {
  std::lock_guard<std::mutex> l(mu); St* st = S(s);
  st->capturing = true; st->capture = new Capture{std::this_thread::get_id(), mode, false}; return 0;
}
int cuStreamEndCapture(void* s, void** g) {
  std::lock_guard<std::mutex> l(mu);
  const bool invalidated = S(s)->capture && S(s)->capture->invalidated;
  for (St* st : streams) st->capturing = false; legacy.capturing = false;
  *g = invalidated ? nullptr : (void*)0x99; return invalidated ? 901 : 0;
}
int cuGraphInstantiateWithFlags(void** e, void*, unsigned long long) { *e = (void*)0x98; return 0; }
int cuGraphLaunch(void*, void*) { return 0; }
int cuGraphExecDestroy(void*) { return 0; }
int cuGraphDestroy(void*) { return 0; }
// ---- NCCL ----
std::atomic<int> fake_fail_next_send{0};
std::atomic<int> fake_stall_next_send{0};  // the next send's transfer never ends until an abort
std::atomic<int> fake_aborts{0};
long xfer_us() { const char* e = getenv("FAKE_XFER_US"); return e ? atol(e) : 500; }
int ncclGetVersion(int* v) { *v = 22809; return 0; }
const char* ncclGetErrorString(int r) { return r == 4 ? "invalid argument" : "nccl error"; }
const char* ncclGetLastError(void*) { return ""; }
int ncclGetUniqueId(void*) { return 0; }
int ncclCommInitRank(void** c, int, ...) { *c = new int(0); return 0; }
int ncclCommSplit(void*, int, int, void** n, void*) { *n = new int(0); return 0; }
int ncclCommDestroy(void*) { return 0; }
int ncclCommAbort(void*) {
  ++fake_aborts;
  std::lock_guard<std::mutex> l(mu);
  aborted = true;
  cv.notify_all();
  return 0;
}
int ncclCommGetAsyncError(void*, int* r) { *r = 0; return 0; }
int ncclCommCount(void*, int* n) { const char* e = getenv("FAKE_NCCL_SIZE"); *n = e ? atoi(e) : 2; return 0; }
int ncclCommCuDevice(void*, int* d) { *d = 0; return 0; }
int ncclCommUserRank(void*, int* r) { *r = 0; return 0; }
int ncclGroupStart() { return 0; }
int ncclGroupEnd() { return 0; }
int ncclSend(const void*, size_t, int, int, void*, void* s) {
  if (fake_fail_next_send.exchange(0)) return 4;
  if (fake_stall_next_send.exchange(0)) {
    start_gpu();
    std::unique_lock<std::mutex> l(mu);
    push(S(s), {4, 0, nullptr, 0}, l);
    return 0;
  }
  return fake_work(s, xfer_us());
}
int ncclRecv(void*, size_t, int, int, void*, void*) { return 0; }
int ncclBroadcast(const void*, void*, size_t, int, int, void*, void*) { return 0; }
}
