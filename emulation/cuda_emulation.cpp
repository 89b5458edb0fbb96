// The emulator's run time: fibers, barriers, the warp collectives and the asynchronous copies.
// Compiled into the test binary, and into every shared object of the emulated backend (which
// includes this file after the kernel's source), so it uses standard headers only.
#include "cuda_emulation.h"

#include <setjmp.h>

#include <cmath>
#include <memory>
#include <vector>

#include "fiber_switch.h"
#include "happens_before.h"
#include "shared_shadow.h"

namespace cpgen::device {
alignas(128) __thread unsigned char shared_storage[256 * 1024];
}

namespace cpgen::emulation {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr int kSharedCapacity = 256 * 1024;
// Bytes past the launch's dynamic shared size filled with a pattern and checked after each CTA:
// a plain store past the declared size (which the emulator does not see) changes them.
constexpr int kSharedGuard = 4096;
constexpr unsigned char kGuardByte = 0xA5;

// One 16-byte cp.async: copied into shared memory only when a wait_group retires its group, so a
// kernel that reads a tile before waiting for it reads the poison the CTA started with.
// A kernel source line (at_site); file null when unknown.
struct Site {
  const char* file = nullptr;
  int line = 0;
};

struct AsyncCopy {
  uint32_t shared_dst;
  unsigned char bytes[16];
  Site site;  // of the cp.async that issued it
  // The issuing thread's clock at the issue: the copy may write its destination any time from
  // then to the wait that retires it, so an access that does not happen before the issue races.
  VectorClock issued;
};

struct Fiber {
  FiberContext context;
  std::unique_ptr<char[]> stack;
  Dim3 thread;
  Site site;  // of the thread's latest emulated operation
  bool done = false;
  std::vector<AsyncCopy> open_group;              // issued since the last commit
  std::vector<std::vector<AsyncCopy>> committed;  // oldest first
};

// Threads arrive at a barrier; the last one opens it (advances the generation); the others yield
// until the generation moves.
struct Barrier {
  int arrived = 0;
  unsigned generation = 0;
};

// Per-warp exchange slot of collective operations: each lane writes its words, all wait, all read,
// all wait again before the slot can be reused. __syncwarp's lanes also release into `released`;
// the last of the 32 hands the joined clock to every lane.
struct WarpSlot {
  Barrier barrier;
  int syncwarp_lanes = 0;
  SyncClock released;
  uint32_t words[32][8];
  const char* instruction[32] = {};  // each lane's warp-collective instruction (warp_gather)
};

// One of the CTA's sixteen hardware barriers (PTX barrier{.cta}, bar.sync / bar.arrive). A phase
// takes the thread count of its first arrival; the ISA counts whole warps, so every lane of a warp
// must reach the same barrier instruction (.aligned), which `warp_lanes` checks when the phase
// completes. The phase completes when `arrived` reaches `expected`: the waiting threads go on and
// the barrier is ready for its next phase at once. Every arrival releases into the phase; when it
// completes, the threads that wait in it (sync, not arrive) acquire what all of them released.
struct NamedBarrier {
  int expected = 0;     // threads of the current phase; set by its first arrival
  int arrived = 0;      // 0: no phase under way
  unsigned generation = 0;  // phases completed
  std::vector<int> warp_lanes;  // lane arrivals of each warp in the current phase
  std::vector<Site> warp_site;  // the barrier instruction each warp's first lane arrived from
  std::vector<char> thread_in;  // whether each thread arrived in the current phase
  std::vector<int> waiters;     // the threads that sync in the current phase
  SyncClock released;           // joined clocks of the current phase's arrivals
};
constexpr int kNamedBarriers = 16;

struct Cta {
  std::vector<Fiber> fibers;
  std::vector<WarpSlot> warps;
  NamedBarrier named[kNamedBarriers];  // id 0 is also __syncthreads'
  HappensBefore order;                 // the shadow's ordering of accesses (happens_before.h)
  FiberContext scheduler;
  Dim3 block;
  Dim3 grid;
  Dim3 block_dim;  // (threads, 1, 1): the emulator runs one-dimensional CTAs
  int current = -1;
  int threads = 0;
  long progress = 0;  // barriers opened and threads finished, to detect a deadlock
  const std::function<void()>* body = nullptr;
  int shared_bytes = 0;
  SharedShadow shadow;
  std::string first_error;  // the sanitizer's first finding, with thread and block
  long errors = 0;
};

thread_local Cta* g_cta = nullptr;  // the CTA this host thread is running
// What cp.async may read and red.add may write in the launches of this host thread; empty: not
// checked (set_global_buffers).
thread_local std::vector<GlobalBuffer> g_buffers;

// Fault recovery (recover_from_fault): armed while this host thread runs a grid; the faulting
// thread and address are kept for the report written after the jump, outside the signal handler.
thread_local sigjmp_buf g_fault_jump;
thread_local bool g_fault_armed = false;
thread_local const void* g_fault_address = nullptr;
thread_local int g_fault_thread = -1;

void yield() { fiber_switch(g_cta->fibers[g_cta->current].context, g_cta->scheduler); }

// The Hopper primitives' hooks into the CTA's life and the emulator's shared reads and writes
// (hopper_emulation.inc, included at the end of this file). Their run time is compiled in only
// with CPGEN_EMULATION_HOPPER: it adds 1.3-3.3 s (50-120%) to the -O2 host compile of this file,
// measured on a shared 2-core machine. The emulated backend defines it (runtime/jit/host_jit.cpp:
// this file is compiled once into a shared run-time object there, so the cost is paid once).
#if defined(CPGEN_EMULATION_HOPPER)
void hopper_cta_begin(int threads);
void hopper_thread_end();
void hopper_cta_end();
std::string hopper_async_writer_text(int actor, uint32_t stamp);
void hopper_check_write(uint32_t offset, int count, const char* what);
#else
void hopper_cta_begin(int) {}
void hopper_thread_end() {}
void hopper_cta_end() {}
std::string hopper_async_writer_text(int, uint32_t) { return "an asynchronous copy"; }
void hopper_check_write(uint32_t, int, const char*) {}
#endif

void wait_at(Barrier& b, int parties) {
  const unsigned generation = b.generation;
  if (++b.arrived == parties) {
    b.arrived = 0;
    ++b.generation;
    ++g_cta->progress;
    return;
  }
  while (b.generation == generation) yield();
}

int lane() { return g_cta->current % 32; }
WarpSlot& warp_slot() { return g_cta->warps[g_cta->current / 32]; }

void report(int thread, const std::string& what, const Site* site);

// Every lane's `count` words, after all 32 lanes of the warp have given theirs. `instruction`
// names the collective (with its qualifiers): ldmatrix, mma, shfl and vote with .sync.aligned
// need every lane of the warp at the same instruction (PTX ISA), so a lane that arrives at
// another one is a finding (any 32 arrivals swapped their words before: lanes 0-15 at an ldmatrix
// and 16-31 at an ldmatrix.trans passed).
template <int kCount>
void warp_gather(const uint32_t* mine, uint32_t (&all)[32][kCount], const char* instruction) {
  WarpSlot& w = warp_slot();
  memcpy(w.words[lane()], mine, kCount * 4);
  w.instruction[lane()] = instruction;
  wait_at(w.barrier, 32);
  for (int l = 0; l < 32; ++l) memcpy(all[l], w.words[l], kCount * 4);
  for (int l = 0; l < 32; ++l)
    // The same literal is the same pointer: the text is compared only where they differ.
    if (w.instruction[l] != instruction && strcmp(w.instruction[l], instruction) != 0) {
      report(g_cta->current, std::string(instruction) + " in lane " + std::to_string(lane()) + " met " +
                                 w.instruction[l] + " in lane " + std::to_string(l) +
                                 " of the same warp: every lane of a warp must execute the same " +
                                 "warp-collective instruction (.sync.aligned)",
             nullptr);
      break;
    }
  wait_at(w.barrier, 32);
}

void fiber_entry() {
  (*g_cta->body)();
  hopper_thread_end();
  g_cta->fibers[g_cta->current].done = true;
  ++g_cta->progress;
  yield();
}

uint16_t element(const uint32_t word, int half) { return static_cast<uint16_t>(word >> (16 * half)); }

std::string hex(uint64_t value) {
  char text[32];
  snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

std::string block_text() {
  return "block (" + std::to_string(g_cta->block.x) + ", " + std::to_string(g_cta->block.y) + ", " +
         std::to_string(g_cta->block.z) + ")";
}

// " at cpgen/step_fwd.cuh:123": the path from its last "cpgen/" on (the templates' include name),
// else whole; empty when unknown.
std::string site_text(const Site& site) {
  if (!site.file) return "";
  std::string file = site.file;
  const size_t cut = file.rfind("cpgen/");
  if (cut != std::string::npos) file = file.substr(cut);
  return " at " + file + ":" + std::to_string(site.line);
}

// A sanitizer finding: the first is kept in full, the rest counted; the launch fails at its end.
// `site`: the operation's source line, by default the reporting thread's latest one.
void report(int thread, const std::string& what, const Site* site = nullptr) {
  if (g_cta->errors++ == 0) {
    const Site where = site ? *site : thread >= 0 ? g_cta->fibers[static_cast<size_t>(thread)].site : Site{};
    g_cta->first_error = (thread >= 0 ? "thread " + std::to_string(thread) + " of " : std::string("")) +
                         block_text() + ": " + what + site_text(where);
  }
}

// A read of [offset, offset + count) of shared memory by the current thread through the shadow:
// reports a read of poison or a race; `what` names the operation ("ldmatrix reads").
void shadow_read(uint32_t offset, int count, const char* what);

// Whether [offset, offset + count) lies in the launch's dynamic shared memory; reports if not.
bool shared_in_bounds(uint32_t offset, int count, const char* what) {
  if (static_cast<uint64_t>(offset) + static_cast<uint64_t>(count) <= static_cast<uint64_t>(g_cta->shared_bytes))
    return true;
  report(g_cta->current, std::string(what) + " shared bytes [" + hex(offset) + ", " + hex(offset + count) +
                             ") past the launch's " + std::to_string(g_cta->shared_bytes) + " dynamic shared bytes");
  return false;
}

// PTX ISA, "Addresses as Operands": an address must be naturally aligned to the access size, or
// the behavior is undefined (the instruction may fault: compute-sanitizer's "misaligned address").
// `address` is a shared offset or a global address; the CTA's dynamic shared memory starts at a
// 128-byte boundary here and at least a 16-byte one on the GPU, so an offset's alignment is the
// address's.
bool aligned(uint64_t address, int alignment, const char* what, const char* space) {
  if (address % static_cast<uint64_t>(alignment) == 0) return true;
  report(g_cta->current, std::string(what) + " " + space + " address " + hex(address) + ", not aligned to " +
                             std::to_string(alignment) + " bytes (misaligned address)");
  return false;
}

// The buffer of the launch that holds all of [p, p + count), or null.
const GlobalBuffer* buffer_holding(const void* p, size_t count) {
  const auto* begin = static_cast<const unsigned char*>(p);
  for (const GlobalBuffer& b : g_buffers) {
    const auto* start = static_cast<const unsigned char*>(b.data);
    if (begin >= start && begin + count <= start + b.bytes) return &b;
  }
  return nullptr;
}

// Where [p, p + count) lies against the nearest buffer that starts at or below p ("" when none
// does): an access just past a buffer's end is the usual off-by-some-rows bug, and naming that
// buffer (its size, its start) says which tensor was indexed.
std::string nearest_buffer_text(const void* p, size_t count) {
  const auto* begin = static_cast<const unsigned char*>(p);
  const GlobalBuffer* nearest = nullptr;
  for (const GlobalBuffer& b : g_buffers)
    if (static_cast<const unsigned char*>(b.data) <= begin &&
        (!nearest || static_cast<const unsigned char*>(b.data) > static_cast<const unsigned char*>(nearest->data)))
      nearest = &b;
  if (!nearest) return "";
  const auto* end = static_cast<const unsigned char*>(nearest->data) + nearest->bytes;
  const std::string buffer = " the " + std::to_string(nearest->bytes) + "-byte buffer at " +
                             hex(reinterpret_cast<uintptr_t>(nearest->data));
  if (begin >= end) return ": it starts " + std::to_string(begin - end) + " bytes past the end of" + buffer;
  return ": its last " + std::to_string(begin + count - end) + " bytes run past the end of" + buffer;
}

// Stands for all of memory while the launch has no buffers (the default): nothing is checked
// against it, and it is neither counted nor poisoned.
const GlobalBuffer kAnyMemory{};

// The launch's buffer that holds all of [p, p + count), for the caller's further checks and
// counts (report_unwritten, count_async_reads); &kAnyMemory when the launch has none. When it has
// buffers and none holds the range, reports it and returns null.
const GlobalBuffer* global_in_bounds(const void* p, size_t count, const char* what) {
  if (g_buffers.empty()) return &kAnyMemory;
  if (const GlobalBuffer* b = buffer_holding(p, count)) return b;
  report(g_cta->current, std::string(what) + " global bytes [" + hex(reinterpret_cast<uintptr_t>(p)) + ", +" +
                             std::to_string(count) + ") outside every buffer of the launch" +
                             nearest_buffer_text(p, count));
  return nullptr;
}

// Counts one read of every 16-byte chunk that [p, p + bytes) touches, when `b`, the buffer
// holding the range, counts reads (GlobalBuffer::async_reads).
void count_async_reads(const GlobalBuffer& b, const void* p, size_t bytes) {
  if (b.async_reads == nullptr || bytes == 0) return;
  const size_t first = static_cast<size_t>(static_cast<const unsigned char*>(p) - static_cast<const unsigned char*>(b.data));
  for (size_t chunk = first / 16; chunk <= (first + bytes - 1) / 16; ++chunk) ++b.async_reads[chunk];
}

// Reports the first aligned `word`-byte word of [p, p + count) that still holds the fill of `b`,
// the buffer holding the range, when b is poisoned (GlobalBuffer::poisoned): a read of global
// memory nothing wrote. `p` is a multiple of `word` (the callers' accesses are aligned to at least
// it); a partial word at the end is not checked.
void report_unwritten(const GlobalBuffer& b, const void* p, size_t count, size_t word, const char* what) {
  if (!b.poisoned) return;
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (size_t at = 0; at + word <= count; at += word) {
    size_t ones = 0;
    while (ones < word && bytes[at + ones] == 0xFF) ++ones;
    if (ones < word) continue;
    const size_t offset = static_cast<size_t>(bytes + at - static_cast<const unsigned char*>(b.data));
    report(g_cta->current, std::string(what) + " global bytes [" + hex(reinterpret_cast<uintptr_t>(bytes + at)) +
                               ", +" + std::to_string(word) + "), bytes " + std::to_string(offset) + ".." +
                               std::to_string(offset + word - 1) + " of the " + std::to_string(b.bytes) +
                               "-byte buffer at " + hex(reinterpret_cast<uintptr_t>(b.data)) +
                               ", which still hold its allocation's fill: nothing wrote them (uninitialized read)");
    return;
  }
}

// `other` accessed the byte before, and neither access happens before the other. An mbarrier's
// landing is described by the Hopper run time (which barrier, which phase).
// Whether two sites are the same source line; unknown sites (no file) match anything.
bool same_site(const Site& a, const Site& b) {
  if (!a.file || !b.file) return true;
  return a.line == b.line && strcmp(a.file, b.file) == 0;
}

void report_race(int thread, const Access& other, uint32_t offset, const char* what, const Site* site = nullptr) {
  if (g_cta->order.is_thread(other.actor)) {
    report(thread, std::string(what) + " shared byte " + hex(offset) + " that thread " + std::to_string(other.actor) +
                       " accessed with no barrier between them (race)", site);
  } else {
    report(thread, std::string(what) + " shared byte " + hex(offset) + " that " +
                       hopper_async_writer_text(other.actor, other.stamp) +
                       ", before this thread's wait observed that phase (race)", site);
  }
}

void shadow_read(uint32_t offset, int count, const char* what) {
  const int t = g_cta->current;
  bool never_written = false;
  const Access other = g_cta->shadow.read(offset, count, t, g_cta->order.stamp(t), g_cta->order.view(t),
                                          device::shared_storage, &never_written);
  if (never_written)
    report(t, std::string(what) + " shared byte " + hex(offset) + ", never written in this CTA");
  else if (!other.none())
    report_race(t, other, offset, what);
}

}  // namespace

void at_site(const char* file, int line) {
  if (g_cta && g_cta->current >= 0) g_cta->fibers[static_cast<size_t>(g_cta->current)].site = {file, line};
}

const Dim3& thread_idx() { return g_cta->fibers[g_cta->current].thread; }
const Dim3& block_idx() { return g_cta->block; }
const Dim3& grid_dim() { return g_cta->grid; }
const Dim3& block_dim() { return g_cta->block_dim; }

namespace {

// The barrier{.cta} operation on barrier `id` with `count` threads (0: all of the CTA), which
// waits (sync) or only counts (arrive). Undefined uses are findings and the operation is dropped
// (a waiting thread then usually ends in a reported deadlock, which names the finding).
void named_barrier(int id, int count, bool wait) {
  const char* op = wait ? "barrier.sync" : "barrier.arrive";
  if (id < 0 || id >= kNamedBarriers) {
    report(g_cta->current, std::string(op) + " on barrier " + std::to_string(id) + "; a CTA has barriers 0 to 15");
    return;
  }
  if (count == 0 && !wait) {
    report(g_cta->current, "barrier.arrive on barrier " + std::to_string(id) + " with no thread count; arrive needs one");
    return;
  }
  if (count < 0 || count % 32 != 0 || count > g_cta->threads) {
    report(g_cta->current, std::string(op) + " on barrier " + std::to_string(id) + " with a thread count of " +
                               std::to_string(count) + "; it must be a multiple of 32 up to the CTA's " +
                               std::to_string(g_cta->threads) + " threads");
    return;
  }
  const int expected = count == 0 ? g_cta->threads : count;
  NamedBarrier& b = g_cta->named[id];
  if (b.arrived == 0) {
    b.expected = expected;
    b.warp_lanes.assign(static_cast<size_t>(g_cta->threads / 32), 0);
    b.warp_site.assign(static_cast<size_t>(g_cta->threads / 32), Site{});
    b.thread_in.assign(static_cast<size_t>(g_cta->threads), 0);
    b.waiters.clear();
    b.released.clear();
  } else if (b.expected != expected) {
    report(g_cta->current, std::string(op) + " on barrier " + std::to_string(id) + " counts " +
                               std::to_string(expected) + " threads, but its current phase began with " +
                               std::to_string(b.expected));
  }
  ++b.arrived;
  const size_t warp = static_cast<size_t>(g_cta->current / 32);
  const Site& here = g_cta->fibers[static_cast<size_t>(g_cta->current)].site;
  const bool again = b.thread_in[static_cast<size_t>(g_cta->current)];  // reported when the phase completes
  b.thread_in[static_cast<size_t>(g_cta->current)] = 1;
  if (b.warp_lanes[warp]++ == 0) {
    b.warp_site[warp] = here;
  } else if (!again && !same_site(b.warp_site[warp], here)) {
    report(g_cta->current, std::string(op) + " on barrier " + std::to_string(id) +
                               " from another instruction than the first of warp " + std::to_string(warp) +
                               "'s lanes in this phase (" + site_text(b.warp_site[warp]).substr(4) +
                               "): every lane of a warp must execute the same barrier instruction (.aligned)");
  }
  g_cta->order.release(g_cta->current, b.released);
  if (wait) b.waiters.push_back(g_cta->current);
  if (b.arrived == b.expected) {
    for (size_t w = 0; w < b.warp_lanes.size(); ++w) {
      const int lanes = b.warp_lanes[w];
      if (lanes == 0 || lanes == 32) continue;
      report(g_cta->current,
             "barrier " + std::to_string(id) + " completed a phase " +
                 (lanes < 32 ? "with " + std::to_string(lanes) + " of warp " + std::to_string(w) +
                                   "'s 32 lanes (the barrier counts whole warps: every lane must execute it)"
                             : "in which warp " + std::to_string(w) + " arrived more than once (" +
                                   std::to_string(lanes) + " lane arrivals; once per phase)"));
      break;
    }
    // The waiters acquire now: they do nothing else before they wake, and the barrier may begin
    // its next phase before they do.
    for (const int waiter : b.waiters) g_cta->order.acquire(waiter, b.released);
    b.arrived = 0;
    ++b.generation;
    ++g_cta->progress;
    return;
  }
  if (!wait) return;
  const unsigned generation = b.generation;
  while (b.generation == generation) yield();
}

// The barriers left with arrivals of a phase that never completed, as "barrier 1 (128 of 256
// threads)", comma separated; empty when none.
std::string open_barriers_text() {
  std::string text;
  for (int id = 0; id < kNamedBarriers; ++id) {
    const NamedBarrier& b = g_cta->named[id];
    if (b.arrived == 0) continue;
    text += (text.empty() ? "" : ", ") + std::string("barrier ") + std::to_string(id) + " (" + std::to_string(b.arrived) +
            " of " + std::to_string(b.expected) + " threads)";
  }
  return text;
}

}  // namespace

void syncthreads() { named_barrier(0, 0, true); }
void barrier_sync(int id, int count) { named_barrier(id, count, true); }
void barrier_arrive(int id, int count) { named_barrier(id, count, false); }
void syncwarp() {
  WarpSlot& w = warp_slot();
  const int warp0 = g_cta->current / 32 * 32;
  g_cta->order.release(g_cta->current, w.released);
  // The last lane in hands every lane the joined clock before any of them leaves the wait.
  if (++w.syncwarp_lanes == 32) {
    for (int l = 0; l < 32; ++l) g_cta->order.acquire(warp0 + l, w.released);
    w.syncwarp_lanes = 0;
    w.released.clear();
  }
  wait_at(w.barrier, 32);
}

uint32_t shfl_xor(uint32_t value, int lane_mask) {
  uint32_t all[32][1];
  warp_gather<1>(&value, all, "shfl.sync.bfly");
  // The ISA's bfly takes the lane mask's low five bits (b[4:0]); the rest read past the warp.
  return all[lane() ^ (lane_mask & 31)][0];
}

bool any(bool predicate) {
  uint32_t mine = predicate, all[32][1];
  warp_gather<1>(&mine, all, "vote.sync.any");
  for (auto& a : all)
    if (a[0]) return true;
  return false;
}

uint32_t shared_offset(const void* p) {
  return static_cast<uint32_t>(static_cast<const unsigned char*>(p) - device::shared_storage);
}

bool shared_load(uint32_t offset, int bytes, int alignment) {
  if (!aligned(offset, alignment, "a shared load reads at", "shared")) return false;
  if (!shared_in_bounds(offset, bytes, "a shared load reads")) return false;
  shadow_read(offset, bytes, "a shared load reads");
  return true;
}

bool global_access(const void* p, int bytes, int alignment, bool store) {
  if (!aligned(reinterpret_cast<uintptr_t>(p), alignment, store ? "a global store writes to" : "a global load reads from",
               "global"))
    return false;
  const GlobalBuffer* b =
      global_in_bounds(p, static_cast<size_t>(bytes), store ? "a global store writes" : "a global load reads");
  if (b == nullptr) return false;
  // Words of 4 bytes (a pair of floats is two values), or the whole of a narrower load.
  if (!store) report_unwritten(*b, p, static_cast<size_t>(bytes), bytes < 4 ? static_cast<size_t>(bytes) : 4, "a global load reads");
  return true;
}

bool shared_store(uint32_t offset, int bytes, int alignment) {
  if (!aligned(offset, alignment, "a shared store writes at", "shared")) return false;
  if (!shared_in_bounds(offset, bytes, "a shared store writes")) return false;
  const int t = g_cta->current;
  const Access other = g_cta->shadow.write(offset, bytes, t, g_cta->order.stamp(t), g_cta->order.view(t), true);
  if (!other.none()) report_race(t, other, offset, "a shared store writes");
  hopper_check_write(offset, bytes, "a shared store writes");
  return true;
}

// PTX ldmatrix .m8n8.x4.b16: lanes 8i..8i+7 address the rows of matrix i; lane l receives in
// register i the elements 2(l%4), 2(l%4)+1 of row l/4 (.trans: element l/4 of rows 2(l%4) and
// 2(l%4)+1).
void ldmatrix_x4(uint32_t (&r)[4], uint32_t shared_address, bool trans) {
  // Each lane's row address is checked by that lane; a row outside, or not at a 16-byte boundary
  // (ISA, ldmatrix: four lanes read a row's 16 bytes, so row addresses are naturally aligned to
  // 16), reads as zeros.
  const bool in_bounds = aligned(shared_address, 16, "ldmatrix reads a row at", "shared") &&
                         shared_in_bounds(shared_address, 16, "ldmatrix reads");
  uint32_t mine[2] = {shared_address, in_bounds ? 1u : 0u}, all[32][2];
  warp_gather<2>(mine, all, trans ? "ldmatrix.sync.aligned.x4.trans" : "ldmatrix.sync.aligned.x4");
  const int l = lane();
  // Element `column` of the row lane `row_lane` addressed.
  auto at = [&all](int row_lane, int column) -> uint32_t {
    if (!all[row_lane][1]) return 0;
    const uint32_t offset = all[row_lane][0] + 2 * column;
    shadow_read(offset, 2, "ldmatrix reads");
    uint16_t v;
    memcpy(&v, device::shared_storage + offset, 2);
    return v;
  };
  for (int i = 0; i < 4; ++i) {
    if (!trans) {
      const int row = 8 * i + l / 4;
      r[i] = at(row, 2 * (l % 4)) | at(row, 2 * (l % 4) + 1) << 16;
    } else {
      r[i] = at(8 * i + 2 * (l % 4), l / 4) | at(8 * i + 2 * (l % 4) + 1, l / 4) << 16;
    }
  }
}

// PTX mma.m16n8k16.row.col, f32 accumulate. With g = lane / 4, t = lane % 4:
// A registers: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..);
// B registers: b0 (k 2t..2t+1, n g), b1 (k 2t+8..2t+9, n g);
// C/D: d0 (g, 2t), d1 (g, 2t+1), d2 (g+8, 2t), d3 (g+8, 2t+1).
void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16) {
  uint32_t mine[6] = {a[0], a[1], a[2], a[3], b0, b1};
  uint32_t all[32][6];
  warp_gather<6>(mine, all, bf16 ? "mma.sync.aligned.m16n8k16.bf16" : "mma.sync.aligned.m16n8k16.f16");
  // This lane's results need rows g and g+8 of A (held by lanes 4g..4g+3) and columns 2t and
  // 2t+1 of B (held by lanes 4n..4n+3 for n = 2t, 2t+1); only those are unpacked.
  const int g = lane() / 4, t = lane() % 4;
  float a_rows[2][16], b_cols[2][16];
  for (int q = 0; q < 4; ++q) {
    const uint32_t* holder = all[4 * g + q];
    for (int h = 0; h < 2; ++h) {
      a_rows[0][2 * q + h] = float_from_16(element(holder[0], h), bf16);
      a_rows[1][2 * q + h] = float_from_16(element(holder[1], h), bf16);
      a_rows[0][2 * q + 8 + h] = float_from_16(element(holder[2], h), bf16);
      a_rows[1][2 * q + 8 + h] = float_from_16(element(holder[3], h), bf16);
      for (int c = 0; c < 2; ++c) {
        const uint32_t* column_holder = all[4 * (2 * t + c) + q];
        b_cols[c][2 * q + h] = float_from_16(element(column_holder[4], h), bf16);
        b_cols[c][2 * q + 8 + h] = float_from_16(element(column_holder[5], h), bf16);
      }
    }
  }
  for (int e = 0; e < 4; ++e) {
    float sum = d[e];
    for (int k = 0; k < 16; ++k) sum += a_rows[e / 2][k] * b_cols[e % 2][k];
    d[e] = sum;
  }
}

namespace {

// x >> shift, rounded to nearest with ties to even on the bits shifted out.
uint32_t shift_round_even(uint32_t x, int shift) {
  if (shift == 0) return x;
  if (shift > 31) return 0;
  const uint32_t kept = x >> shift, dropped = x & ((1u << shift) - 1), half = 1u << (shift - 1);
  return kept + (dropped > half || (dropped == half && (kept & 1u)) ? 1u : 0u);
}

uint16_t to_bf16(uint32_t sign, uint32_t magnitude) {
  // bf16 is the upper half of an f32; a carry out of the mantissa bumps the exponent, and from
  // the largest finite value lands on infinity (0x7f80), as cvt.rn does.
  return static_cast<uint16_t>(sign | shift_round_even(magnitude, 16));
}

uint16_t to_fp16(uint32_t sign, uint32_t magnitude) {
  const int exponent = static_cast<int>(magnitude >> 23) - 127;
  if (exponent >= 16) return static_cast<uint16_t>(sign | 0x7c00u);  // 2^16 and up: infinity
  if (exponent >= -14) {
    // Normal range: rebias (127 -> 15) in place, then drop 13 mantissa bits; a carry may reach the
    // exponent, and past 65504 it reaches 0x7c00, infinity.
    const uint32_t rebased = magnitude - (112u << 23);
    return static_cast<uint16_t>(sign | shift_round_even(rebased, 13));
  }
  if (exponent < -25) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  // Subnormal half: value = significand * 2^(exponent - 23) expressed in units of 2^-24; a round
  // up from the largest subnormal gives 0x400, the smallest normal, which is the right encoding.
  const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  return static_cast<uint16_t>(sign | shift_round_even(significand, -1 - exponent));
}

}  // namespace

uint16_t float_to_16(float value, bool bf16) {
  uint32_t bits;
  memcpy(&bits, &value, 4);
  const uint32_t sign = (bits >> 16) & 0x8000u, magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return 0x7fffu;  // PTX: a NaN converts to the canonical NaN
  return bf16 ? to_bf16(sign, magnitude) : to_fp16(sign, magnitude);
}

float float_from_16(uint16_t bits, bool bf16) {
  uint32_t wide;
  if (bf16) {
    wide = static_cast<uint32_t>(bits) << 16;
  } else {
    const uint32_t sign = (bits & 0x8000u) << 16, exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
    if (exponent == 0) {
      const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // * 2^-24, exact
      return sign ? -magnitude : magnitude;
    }
    wide = sign | (exponent == 31 ? 0x7f800000u : (exponent + 112u) << 23) | mantissa << 13;
  }
  float out;
  memcpy(&out, &wide, 4);
  return out;
}

uint32_t pack_16x2(float lo, float hi, bool bf16) {
  return float_to_16(lo, bf16) | static_cast<uint32_t>(float_to_16(hi, bf16)) << 16;
}

// The source is read at issue (the kernel does not change its inputs), the destination written
// when the group retires.
// Copies whose source or destination is out of bounds are reported and dropped.
void cp_async_16(uint32_t shared_dst, const void* global_src, bool valid) {
  // The access size is cp-size (16) on both sides; the source only counts when it is read.
  if (!aligned(shared_dst, 16, "cp.async writes to", "shared")) return;
  if (!shared_in_bounds(shared_dst, 16, "cp.async writes")) return;
  if (valid && !aligned(reinterpret_cast<uintptr_t>(global_src), 16, "cp.async reads from", "global")) return;
  const GlobalBuffer* source = valid ? global_in_bounds(global_src, 16, "cp.async reads") : nullptr;
  if (valid && source == nullptr) return;
  AsyncCopy copy{shared_dst, {}, g_cta->fibers[g_cta->current].site, g_cta->order.view(g_cta->current)};
  if (valid) {
    report_unwritten(*source, global_src, 16, 4, "cp.async reads");
    memcpy(copy.bytes, global_src, 16);
    count_async_reads(*source, global_src, 16);
  }
  g_cta->fibers[g_cta->current].open_group.push_back(copy);
}
void cp_async_commit() {
  Fiber& f = g_cta->fibers[g_cta->current];
  f.committed.push_back(std::move(f.open_group));
  f.open_group.clear();
}
void cp_async_wait(int pending) {
  Fiber& f = g_cta->fibers[g_cta->current];
  while (static_cast<int>(f.committed.size()) > pending) {
    for (const AsyncCopy& copy : f.committed.front()) {
      // The copy may land any time between issue and here (PTX ISA, cp.async: its writes are
      // not ordered with the thread's later instructions until the wait). So the accesses it is
      // checked against are those that do not happen before the issue (its clock then): a read
      // another warp makes after the issue, even one a barrier orders before this wait, may see
      // either bytes (a kernel that issues a stage's next load before the barrier proving its last
      // readers left races so; checked against the wait's clock, that went unseen). It is stamped
      // as of this wait, so that a read by another thread before the wait and a barrier races too.
      const int t = g_cta->current;
      // cp.async (not bulk) writes through the generic proxy (PTX ISA: only cp.async.bulk runs in
      // the async proxy).
      const Access other = g_cta->shadow.write(copy.shared_dst, 16, t, g_cta->order.stamp(t), copy.issued, true);
      if (!other.none()) report_race(t, other, copy.shared_dst, "cp.async lands in", &copy.site);
      hopper_check_write(copy.shared_dst, 16, "cp.async lands in");
      memcpy(device::shared_storage + copy.shared_dst, copy.bytes, 16);
    }
    f.committed.erase(f.committed.begin());
  }
}

namespace {
float flush_subnormal(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
}  // namespace

void red_add_f32(float* address, float value) {
  if (!aligned(reinterpret_cast<uintptr_t>(address), 4, "red.add writes to", "global")) return;
  const GlobalBuffer* b = global_in_bounds(address, 4, "red.add writes");
  if (b == nullptr) return;
  report_unwritten(*b, address, 4, 4, "red.add adds to");
  // The host's float addition rounds to nearest even (the default rounding mode).
  *address = flush_subnormal(flush_subnormal(*address) + flush_subnormal(value));
}

void red_add_v2_f32(float* address, float x, float y) {
  if (!aligned(reinterpret_cast<uintptr_t>(address), 8, "red.add.v2 writes to", "global")) return;
  const GlobalBuffer* b = global_in_bounds(address, 8, "red.add.v2 writes");
  if (b == nullptr) return;
  report_unwritten(*b, address, 8, 4, "red.add.v2 adds to");
  address[0] = flush_subnormal(flush_subnormal(address[0]) + flush_subnormal(x));
  // Atomic per element only: other threads may run between the two halves, so the emulator lets
  // them (a kernel that relies on the pair landing together can then be caught). A yield that is
  // not a wait: this thread resumes with work to do, which is progress for deadlock detection.
  ++g_cta->progress;
  yield();
  address[1] = flush_subnormal(flush_subnormal(address[1]) + flush_subnormal(y));
}

uint32_t atom_add_u32(uint32_t* address, uint32_t value) {
  if (!aligned(reinterpret_cast<uintptr_t>(address), 4, "atom.add reads and writes", "global")) return 0;
  const GlobalBuffer* b = global_in_bounds(address, 4, "atom.add writes");
  if (b == nullptr) return 0;
  report_unwritten(*b, address, 4, 4, "atom.add adds to");
  const uint32_t old = *address;
  *address = old + value;  // unsigned: wraps modulo 2^32, as the ISA's .u32 add
  return old;
}

void red_min_u64(uint64_t* address, uint64_t value) {
  if (!aligned(reinterpret_cast<uintptr_t>(address), 8, "red.min reads and writes", "global")) return;
  const GlobalBuffer* b = global_in_bounds(address, 8, "red.min writes");
  if (b == nullptr) return;
  report_unwritten(*b, address, 8, 8, "red.min compares with");
  if (value < *address) *address = value;  // both uint64_t: the unsigned order of .u64
}

namespace {
std::string run_grid_guarded(Cta& cta);
}  // namespace

std::string launch(unsigned grid_x, unsigned grid_y, unsigned threads, int shared_bytes,
                   const std::function<void()>& body) {
  return launch(grid_x, grid_y, 1, threads, shared_bytes, body);
}

std::string launch(unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned threads,
                   int shared_bytes, const std::function<void()>& body) {
  if (shared_bytes < 0 || shared_bytes > kSharedCapacity - kSharedGuard)
    return "dynamic shared memory of " + std::to_string(shared_bytes) + " bytes; the emulator has " +
           std::to_string(kSharedCapacity - kSharedGuard);
  if (threads % 32 != 0) return "threads must be whole warps";
  Cta cta;
  cta.threads = static_cast<int>(threads);
  cta.block_dim = {threads, 1, 1};
  cta.body = &body;
  cta.fibers.resize(threads);
  for (Fiber& f : cta.fibers) f.stack.reset(new char[kStackBytes]);
  cta.grid = {grid_x, grid_y, grid_z};
  cta.shared_bytes = shared_bytes;
  g_cta = &cta;
  std::string error = run_grid_guarded(cta);
  g_cta = nullptr;
  // A deadlock often follows a finding (a wait on a barrier a rejected operation never reached):
  // the finding is the cause, so it goes with the report.
  if (!error.empty())
    return cta.errors > 0 && error.rfind("deadlock", 0) == 0 ? error + "; after the sanitizer's finding: " + cta.first_error
                                                             : error;
  if (cta.errors > 0)
    return "sanitizer: " + cta.first_error +
           (cta.errors > 1 ? " (and " + std::to_string(cta.errors - 1) + " more findings)" : std::string());
  return {};
}

namespace {

// Every CTA of the grid, one after another: an empty string, or a deadlock.
std::string run_grid(Cta& cta) {
  const unsigned grid_x = cta.grid.x, grid_y = cta.grid.y, grid_z = cta.grid.z;
  const unsigned threads = static_cast<unsigned>(cta.threads);
  const int shared_bytes = cta.shared_bytes;
  for (unsigned bz = 0; bz < grid_z; ++bz)
  for (unsigned by = 0; by < grid_y; ++by)
    for (unsigned bx = 0; bx < grid_x; ++bx) {
      memset(device::shared_storage, 0xFF, static_cast<size_t>(shared_bytes));
      memset(device::shared_storage + shared_bytes, kGuardByte, kSharedGuard);
      cta.shadow.reset(shared_bytes);
      cta.block = {bx, by, bz};
      cta.warps.assign(threads / 32, WarpSlot{});
      for (NamedBarrier& b : cta.named) b = NamedBarrier{};
      cta.order.reset(cta.threads);
      hopper_cta_begin(cta.threads);
      for (unsigned t = 0; t < threads; ++t) {
        Fiber& f = cta.fibers[t];
        f.thread = {t, 0, 0};
        f.done = false;
        f.open_group.clear();
        f.committed.clear();
        fiber_prepare(f.context, f.stack.get(), kStackBytes, fiber_entry);
      }
      int finished = 0;
      while (finished < cta.threads) {
        const long before = cta.progress;
        finished = 0;
        for (int t = 0; t < cta.threads; ++t) {
          if (cta.fibers[t].done) {
            ++finished;
            continue;
          }
          cta.current = t;
          fiber_switch(cta.scheduler, cta.fibers[t].context);
        }
        if (finished < cta.threads && cta.progress == before) {
          // A whole round without any barrier opening or thread finishing: stuck for good. The
          // fibers' stacks are dropped with the CTA; nothing on them owns resources.
          const std::string open = open_barriers_text();
          return "deadlock in block (" + std::to_string(bx) + ", " + std::to_string(by) + ", " +
                 std::to_string(bz) + "): threads wait at different barriers, or on mbarrier phases that never complete" +
                 (open.empty() ? std::string() : "; incomplete: " + open);
        }
      }
      hopper_cta_end();
      // Arrivals no phase completed: barrier.arrive and barrier.sync that do not pair up.
      if (const std::string open = open_barriers_text(); !open.empty())
        report(-1, "the CTA ends with arrivals of barrier phases that never completed: " + open);
      for (int i = 0; i < kSharedGuard; ++i)
        if (device::shared_storage[shared_bytes + i] != kGuardByte) {
          report(-1, "a store to shared byte " + hex(static_cast<uint64_t>(shared_bytes + i)) + " past the launch's " +
                         std::to_string(shared_bytes) + " dynamic shared bytes");
          break;
        }
    }
  return {};
}

// Where a faulting address lies relative to the nearest of the launch's buffers.
std::string nearest_buffer_text(const void* address) {
  const auto a = reinterpret_cast<uintptr_t>(address);
  std::string best;
  uintptr_t best_distance = UINTPTR_MAX;
  for (const GlobalBuffer& b : g_buffers) {
    const auto start = reinterpret_cast<uintptr_t>(b.data), end = start + b.bytes;
    const std::string buffer = "the " + std::to_string(b.bytes) + "-byte buffer at " + hex(start);
    if (a >= end && a - end < best_distance) {
      best_distance = a - end;
      best = std::to_string(a - end) + " bytes past the end of " + buffer;
    } else if (a < start && start - a <= best_distance) {
      best_distance = start - a;
      best = std::to_string(start - a) + " bytes before the start of " + buffer;
    }
  }
  return best.empty() ? "no buffer of the launch is near it" : best;
}

// run_grid with fault recovery armed. Nothing here changes between sigsetjmp and the jump back
// but memory reached through `cta`, so no local needs to be volatile.
std::string run_grid_guarded(Cta& cta) {
  if (sigsetjmp(g_fault_jump, 1) != 0) {
    g_fault_armed = false;
    // The CTA is abandoned where it stood; its fibers' stacks go with it (they own nothing).
    const int thread = g_fault_thread;
    std::string what = "plain access to global address " + hex(reinterpret_cast<uintptr_t>(g_fault_address)) +
                       " faults: " + nearest_buffer_text(g_fault_address);
    return "sanitizer: " + (thread >= 0 ? "thread " + std::to_string(thread) + " of " : std::string()) +
           block_text() + ": " + what;
  }
  // Disarmed on every way out, an exception included: a later fault must not jump into a frame
  // that is gone. (Not by a destructor: the jump back skips this frame's objects, and skipping a
  // non-trivial destructor that way is undefined.)
  g_fault_armed = true;
  try {
    std::string error = run_grid(cta);
    g_fault_armed = false;
    return error;
  } catch (...) {
    g_fault_armed = false;
    throw;
  }
}

}  // namespace

bool recover_from_fault(const void* address) {
  if (!g_fault_armed || g_cta == nullptr) return false;
  g_fault_armed = false;
  g_fault_address = address;
  g_fault_thread = g_cta->current;
  siglongjmp(g_fault_jump, 1);
}

void set_global_buffers(const GlobalBuffer* buffers, int count) {
  g_buffers.assign(buffers, buffers + (count > 0 ? count : 0));
}

}  // namespace cpgen::emulation

#include "approximation.inc"

#if defined(CPGEN_EMULATION_HOPPER)
#include "hopper_emulation.inc"
#endif
