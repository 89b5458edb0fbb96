#include "runtime/backend/emulated_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "cpgen/error.h"
#include "runtime/backend/launch_grid.h"
#include "runtime/backend/wgmma_params.h"
#include "runtime/jit/host_jit.h"
#include "runtime/ring/kernel_support.h"

namespace cpgen {
namespace {

// The largest alignment a kernel asks of its buffers (16-byte cp.async rows and vector loads).
constexpr size_t kAlignment = 16;

// The alignment a buffer of `bytes` gets: the largest power of two up to kAlignment that divides
// its size. A buffer's elements are never wider than its size's alignment allows (a 4-byte lse
// array of odd length holds floats, not 16-byte rows), and with this alignment its end falls
// exactly on the guard page, so an access even one byte past the end faults.
size_t alignment_for(size_t bytes) {
  size_t a = kAlignment;
  while (a > 1 && bytes % a != 0) a /= 2;
  return a;
}

size_t page_bytes() {
  static const size_t bytes = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return bytes;
}

size_t round_up(size_t value, size_t unit) { return (value + unit - 1) / unit * unit; }

// One allocation's mapping: a guard page, the pages holding the buffer, a guard page. The buffer
// ends where the second guard starts (alignment_for).
struct GuardedMapping {
  void* base = nullptr;
  size_t mapped = 0;
  void* data = nullptr;
};

GuardedMapping map_guarded(size_t bytes) {
  const size_t page = page_bytes();
  // An empty buffer keeps the full alignment (a rank without rows still hands over its pointers).
  const size_t rounded = bytes == 0 ? kAlignment : round_up(bytes, alignment_for(bytes));
  const size_t usable = round_up(rounded, page);
  GuardedMapping m;
  m.mapped = usable + 2 * page;
  // Reserved inaccessible, then only the middle opened: the guards never become accessible.
  void* base = ::mmap(nullptr, m.mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    throw Error(ErrorKind::kInternal, "EmulatedDevice: cannot map " + std::to_string(m.mapped) + " bytes for a " +
                                          std::to_string(bytes) + "-byte buffer: " + std::strerror(errno));
  auto* first = static_cast<unsigned char*>(base) + page;
  if (::mprotect(first, usable, PROT_READ | PROT_WRITE) != 0) {
    const int error = errno;
    ::munmap(base, m.mapped);
    throw Error(ErrorKind::kInternal, "EmulatedDevice: cannot open " + std::to_string(usable) +
                                          " bytes between guard pages: " + std::strerror(error));
  }
  m.base = base;
  m.data = first + (usable - rounded);
  return m;
}

EmulatedGrid to_emulated(const gpu::StepGrid& g) { return {g.x, g.y, g.z}; }

}  // namespace

EmulatedDevice::EmulatedDevice(const std::vector<std::pair<StepType, KernelSpec>>& per_step,
                               const std::string& arch, KernelStore* store)
    : arch_(arch), store_(store) {
  by_step_.fill(kNone);
  for (const auto& [step, spec] : per_step) {
    if (is_backward(step) != spec.is_backward() || (spec.is_backward() && spec.kind != KernelKind::kBackwardStep))
      throw Error(ErrorKind::kInternal, "EmulatedDevice: step type " + std::string(step_type_name(step)) +
                                            " given kernel " + spec.uri() + " of another kind");
    const int index = add(spec);
    by_step_[static_cast<size_t>(step)] = index;
    int& first = is_backward(step) ? first_backward_ : first_forward_;
    if (first == kNone) first = index;
  }
}

EmulatedDevice::EmulatedDevice(const std::vector<std::pair<StepType, KernelSpec>>& per_step,
                               const KernelSpec& backward_pre, const KernelSpec& backward_convert,
                               const std::string& arch, KernelStore* store)
    : EmulatedDevice(per_step, arch, store) {
  if (backward_pre.kind != KernelKind::kBackwardPre || backward_convert.kind != KernelKind::kBackwardConvert)
    throw Error(ErrorKind::kInternal, "EmulatedDevice: " + backward_pre.uri() + " and " + backward_convert.uri() +
                                          " are not a backward preprocessing and conversion kernel");
  backward_pre_ = add(backward_pre);
  backward_convert_ = add(backward_convert);
}

int EmulatedDevice::add(const KernelSpec& spec) {
  for (size_t i = 0; i < loaded_.size(); ++i)
    if (loaded_[i].spec == spec) return static_cast<int>(i);
  // The emulator grants any shared size up to its own 256 KB; the GPU's limit is what decides
  // whether the kernel is one the GPU could run, so the emulator runs no kernel the GPU refuses.
  const Feasibility f = check_feasibility(spec, arch_);
  if (!f.feasible) throw Error(ErrorKind::kInfeasible, spec.uri() + " on " + arch_ + ": " + f.reason);
  Loaded k;
  k.spec = spec;
  k.shared_bytes = f.shared_bytes;
  k.kernel = std::make_unique<EmulatedKernel>(compile_emulated(spec, store_));
  loaded_.push_back(std::move(k));
  return static_cast<int>(loaded_.size() - 1);
}

const EmulatedDevice::Loaded& EmulatedDevice::for_step(StepType step) const {
  int index = by_step_[static_cast<size_t>(step)];
  if (index == kNone) index = is_backward(step) ? first_backward_ : first_forward_;
  if (index == kNone)
    throw Error(ErrorKind::kBadInput, std::string(is_backward(step) ? "backward" : "forward") +
                                          " not available on the emulated backend: no " +
                                          (is_backward(step) ? "backward" : "forward") + " kernel was given (step " +
                                          std::string(step_type_name(step)) + ")");
  return loaded_[static_cast<size_t>(index)];
}

const KernelSpec& EmulatedDevice::spec(StepType step) const { return for_step(step).spec; }

long EmulatedDevice::launches() const { return launches_.load(); }

double EmulatedDevice::launch_ms() const { return static_cast<double>(launch_ns_.load()) / 1e6; }

void EmulatedDevice::run(const Loaded& k, EmulatedGrid grid, const void* params) {
  std::vector<CpgenEmulatedBuffer> buffers;
  {
    std::lock_guard<std::mutex> lock(allocations_mutex_);
    for (const auto& [data, bytes] : allocations_) {
      const auto counts = read_counts_.find(data);
      // Every allocation starts all ones (allocate): the sanitizer reports reads of what is left.
      buffers.push_back({data, bytes, counts == read_counts_.end() ? nullptr : counts->second.data(), 1});
    }
  }
  const auto start = std::chrono::steady_clock::now();
  k.kernel->launch(grid, k.spec.threads(), k.shared_bytes, params, buffers);
  launch_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  ++launches_;
}

DeviceAllocation EmulatedDevice::allocate(size_t bytes) {
  const GuardedMapping m = map_guarded(bytes);
  // cuMemAlloc leaves memory as it was; fresh pages here would read as zeros, which hide a read of
  // memory nothing wrote. All ones instead: a NaN in every dtype, so such a read spoils a result.
  std::memset(m.data, 0xFF, bytes);
  {
    std::lock_guard<std::mutex> lock(allocations_mutex_);
    allocations_[m.data] = bytes;  // the requested size: the rounding is not the caller's to use
  }
  return DeviceAllocation(std::shared_ptr<void>(m.data,
                                                [this, m](void* p) {
                                                  {
                                                    std::lock_guard<std::mutex> lock(allocations_mutex_);
                                                    allocations_.erase(p);
                                                    read_counts_.erase(p);
                                                  }
                                                  ::munmap(m.base, m.mapped);
                                                }),
                          bytes);
}

void EmulatedDevice::count_reads(const void* data) {
  std::lock_guard<std::mutex> lock(allocations_mutex_);
  const auto a = allocations_.find(data);
  if (a == allocations_.end()) throw Error(ErrorKind::kInternal, "count_reads: not the start of a live allocation");
  // The vector is never resized after this, so the pointer launches get stays valid.
  read_counts_[data].assign((a->second + 15) / 16, 0u);
}

std::vector<unsigned> EmulatedDevice::take_reads(const void* data) {
  std::lock_guard<std::mutex> lock(allocations_mutex_);
  const auto counts = read_counts_.find(data);
  if (counts == read_counts_.end()) throw Error(ErrorKind::kInternal, "take_reads: the allocation is not counted");
  std::vector<unsigned> taken = counts->second;
  std::fill(counts->second.begin(), counts->second.end(), 0u);
  return taken;
}

// A rank without rows hands over empty vectors, whose data() may be null: memcpy, memmove and
// memset must not see a null pointer even for no bytes (UBSan's nonnull check found it).
void EmulatedDevice::upload(void* dst, const void* host, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, host, bytes);
}

void EmulatedDevice::copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memmove(dst, src, bytes);
}

void EmulatedDevice::zero(void* dst, size_t bytes) {
  if (bytes > 0) std::memset(dst, 0, bytes);
}

void EmulatedDevice::launch_forward(StepType step, const RingFwdParams& params) {
  if (is_backward(step))
    throw Error(ErrorKind::kInternal, "EmulatedDevice: forward launch for step type " +
                                          std::string(step_type_name(step)));
  const Loaded& k = for_step(step);
  gpu::check_launch_matches_spec(k.spec, params);
  const EmulatedGrid grid = to_emulated(gpu::step_grid(k.spec, params, kResidentCtas));
  if (k.spec.kind == KernelKind::kForwardWgmma) {
    // The maps the GPU device would get from the driver, from the same descriptions, made by the
    // emulator's encoder (runtime/backend/wgmma_params.h).
    const RingFwdWgmmaParams wgmma = wgmma_params(k.spec, params, &encode_emulated_tma_map, kL2Bytes);
    run(k, grid, &wgmma);
  } else {
    run(k, grid, &params);
  }
}

bool EmulatedDevice::forward_takes_query_view(StepType step) const {
  return kernel_family_abilities(spec(step).kind).query_view;
}

void EmulatedDevice::launch_backward(StepType step, const RingBwdParams& params) {
  if (!is_backward(step))
    throw Error(ErrorKind::kInternal, "EmulatedDevice: backward launch for step type " +
                                          std::string(step_type_name(step)));
  const Loaded& k = for_step(step);
  gpu::check_launch_matches_spec(k.spec, params);
  run(k, to_emulated(gpu::step_bwd_grid(k.spec, params)), &params);
}

void EmulatedDevice::launch_backward_pre(const RingBwdPreParams& params) {
  if (backward_pre_ == kNone)
    throw Error(ErrorKind::kBadInput, "backward not available on the emulated backend: no preprocessing kernel was given");
  const Loaded& k = loaded_[static_cast<size_t>(backward_pre_)];
  const long long rows = static_cast<long long>(params.batch) * params.q_heads * params.q_len;
  run(k, to_emulated(gpu::row_grid(rows, k.spec.warps)), &params);
}

void EmulatedDevice::launch_backward_convert(const RingBwdConvertParams& params) {
  if (backward_convert_ == kNone)
    throw Error(ErrorKind::kBadInput, "backward not available on the emulated backend: no conversion kernel was given");
  const Loaded& k = loaded_[static_cast<size_t>(backward_convert_)];
  const long long rows = static_cast<long long>(params.batch) * params.heads * params.len;
  run(k, to_emulated(gpu::row_grid(rows, k.spec.warps)), &params);
}

}  // namespace cpgen
