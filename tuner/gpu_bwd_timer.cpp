#include "tuner/gpu_bwd_timer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cpgen/error.h"
#include "generator/kernel_spec.h"
#include "runtime/backend/gpu_step_kernel.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/module.h"
#include "tuner/event_timing.h"
#include "tuner/input_sets.h"
#include "tuner/parallel_for.h"

namespace cpgen {
namespace {

std::string value_text(double x) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// "dk[b0 h1 row 37 d5]" for flat index i of a [batch, heads, len, head_dim] tensor.
std::string element_name(const char* tensor, int64_t i, int heads, int64_t len, int head_dim) {
  const int64_t row_index = i / head_dim;
  return std::string(tensor) + "[b" + std::to_string(row_index / (heads * len)) + " h" +
         std::to_string(row_index / len % heads) + " row " + std::to_string(row_index % len) + " d" +
         std::to_string(i % head_dim) + "]";
}

// Rows 0, len/8, 2 len/8, ... and the last: the edges of the mask and a stride through the middle.
std::vector<int64_t> sampled_rows(int64_t len) {
  std::vector<int64_t> rows;
  const int64_t stride = std::max<int64_t>(1, len / 8);
  for (int64_t r = 0; r < len; r += stride) rows.push_back(r);
  if (rows.back() != len - 1) rows.push_back(len - 1);
  return rows;
}

}  // namespace

GpuBackwardTimer::GpuBackwardTimer(int device) : device_(device) {
  use_primary_context(device_);
  stream_ = std::make_unique<gpu::Stream>();
}

GpuBackwardTimer::~GpuBackwardTimer() {
  // The stream and the input sets belong to the device's primary context.
  use_primary_context(device_);
  sets_.clear();
  stream_.reset();
}

RingBwdParams GpuBackwardTimer::params_for(const InputSet& set, bool accumulate_dkv) const {
  BackwardStepBuffers b;
  b.q = set.q.as<void>();
  b.k = set.k.as<void>();
  b.v = set.v.as<void>();
  b.dout = set.dout.as<void>();
  b.lse = set.lse.as<const float>();
  b.delta = set.delta.as<const float>();
  b.dq_acc = set.dq_acc.as<float>();
  b.dk_acc = set.dk_acc.as<float>();
  b.dv_acc = set.dv_acc.as<float>();
  b.q_positions = q_positions_.as<const int>();
  b.kv_positions = kv_positions_.as<const int>();
  if (workload_.mask.key_intervals()) {
    b.q_key_first = q_key_first_.as<const int>();
    b.q_key_last = q_key_last_.as<const int>();
  }
  return backward_step_params(workload_, b, accumulate_dkv);
}

void GpuBackwardTimer::launch(const KernelSpec& spec, const CompiledKernel& kernel, const RingBwdParams& params) {
  const LoadedKernel& loaded = load_kernel(kernel, device_);
  const Feasibility f = check_feasibility(spec, kernel.arch);
  loaded.reserve_dynamic_shared(f.shared_bytes);
  // The runtime's grid for the same launch (templates/step_bwd.cuh: a CTA per block_n keys).
  const gpu::StepGrid grid = gpu::step_bwd_grid(spec, params);
  LaunchShape shape;
  shape.grid[0] = grid.x;
  shape.grid[1] = grid.y;
  shape.grid[2] = grid.z;
  shape.block[0] = static_cast<unsigned>(spec.threads());
  shape.dynamic_shared_bytes = f.shared_bytes;
  shape.stream = stream_->get();
  loaded.launch(params, shape);
}

TimingOutcome GpuBackwardTimer::begin_workload(const WorkloadKey& w, const KernelSpec& reference_spec,
                                               const CompiledKernel& reference) {
  end_workload();
  if (!is_backward(w.step) || reference_spec.kind != KernelKind::kBackwardStep) {
    throw Error(ErrorKind::kInternal, "GpuBackwardTimer: " + reference_spec.uri() + " for " + w.describe() +
                                          " is not a backward step");
  }
  use_primary_context(device_);
  const cu::DriverApi& api = cu::driver();
  workload_ = w;
  const uint64_t seed = timing_seed(w);
  host_ = backward_step_inputs(w, seed);
  // `out` only entered delta; the float64 check reads q, k, v, dout, lse and delta.
  host_.out = {};
  useful_flops_ = backward_useful_flops(w, host_.positions);
  q_positions_ = DeviceBuffer::from_host(device_, host_.positions.q);
  kv_positions_ = DeviceBuffer::from_host(device_, host_.positions.kv);
  if (w.mask.key_intervals()) {
    const StepKeyIntervals intervals = step_key_intervals(host_.mask, host_.positions);
    q_key_first_ = DeviceBuffer::from_host(device_, intervals.first);
    q_key_last_ = DeviceBuffer::from_host(device_, intervals.last);
  }

  const size_t q_elems = host_.q.size(), kv_elems = host_.k.size(), rows = host_.lse.size();
  // q, dout, k, v in 16 bits; lse, delta, dq_acc, dk_acc, dv_acc in fp32.
  const size_t set_bytes = q_elems * 2 * 2 + kv_elems * 2 * 2 + rows * 4 * 2 + q_elems * 4 + kv_elems * 4 * 2;
  const size_t count = device_input_set_count(device_, set_bytes, "backward input set of " + w.describe());
  for (size_t s = 0; s < count; ++s) {
    InputSet set;
    if (s == 0) {
      // The same tensors of the seed as host_'s (backward_step_inputs), drawn straight into 16 bits.
      set.q = DeviceBuffer::from_host(device_, grid_bits(seed, kInputQ, q_elems, w.dtype));
      set.k = DeviceBuffer::from_host(device_, grid_bits(seed, kInputK, kv_elems, w.dtype));
      set.v = DeviceBuffer::from_host(device_, grid_bits(seed, kInputV, kv_elems, w.dtype));
      set.dout = DeviceBuffer::from_host(device_, grid_bits(seed, kInputDout, q_elems, w.dtype));
      set.lse = DeviceBuffer::from_host(device_, host_.lse);
      set.delta = DeviceBuffer::from_host(device_, host_.delta);
    } else {
      // Copies at other addresses are as cold in L2 as fresh data and cost no host time.
      const InputSet& first = sets_.front();
      set.q = first.q.copy();
      set.k = first.k.copy();
      set.v = first.v.copy();
      set.dout = first.dout.copy();
      set.lse = first.lse.copy();
      set.delta = first.delta.copy();
    }
    // Zeroed, so that a step that adds (every step type but bwd-diagonal) adds to finite values.
    set.dq_acc = DeviceBuffer(device_, q_elems * 4);
    set.dk_acc = DeviceBuffer(device_, kv_elems * 4);
    set.dv_acc = DeviceBuffer(device_, kv_elems * 4);
    set.dq_acc.fill_bytes(0);
    set.dk_acc.fill_bytes(0);
    set.dv_acc.fill_bytes(0);
    sets_.push_back(std::move(set));
  }
  CPGEN_CU_CHECK(api.cuCtxSynchronize());

  TimingOutcome check = run_checked(reference_spec, reference, &reference_);
  if (check.disposition != Disposition::kOk) return check;
  // Every element written: the candidates are compared with these, so a NaN here would make
  // every comparison fail for the reference's fault.
  const int hd = w.head_dim;
  const struct {
    const char* name;
    const std::vector<float>* values;
    int heads;
    int64_t len;
  } tensors[] = {{"dq", &reference_.dq, w.q_heads, w.q_len}, {"dk", &reference_.dk, w.kv_heads, w.kv_len},
                 {"dv", &reference_.dv, w.kv_heads, w.kv_len}};
  for (const auto& t : tensors) {
    const auto bad = std::find_if(t.values->begin(), t.values->end(), [](float x) { return !std::isfinite(x); });
    if (bad != t.values->end()) {
      return {Disposition::kWrongResult, {}, reference_spec.uri() + " " +
                  element_name(t.name, bad - t.values->begin(), t.heads, t.len, hd) + " = " + value_text(*bad) +
                  " (not written or not finite)"};
    }
  }
  const TimingOutcome against_float64 = check_against_float64(reference_spec);
  if (against_float64.disposition != Disposition::kOk) return against_float64;
  // Device copies for the candidates' check (set 0's accumulators are reset for each).
  if (!compare_) compare_ = std::make_unique<GpuCompare>(device_);
  reference_dq_ = sets_.front().dq_acc.copy();
  reference_dk_ = sets_.front().dk_acc.copy();
  reference_dv_ = sets_.front().dv_acc.copy();
  return against_float64;
}

TimingOutcome GpuBackwardTimer::check_against_float64(const KernelSpec& spec) const {
  const WorkloadKey& w = workload_;
  const int hd = w.head_dim;
  const std::vector<int64_t> q_rows = sampled_rows(w.q_len), keys = sampled_rows(w.kv_len);
  // One message per (batch, head) of dq and per (batch, kv head) of dk/dv; the first is reported.
  const int64_t q_pairs = static_cast<int64_t>(w.batch) * w.q_heads, kv_pairs = static_cast<int64_t>(w.batch) * w.kv_heads;
  std::vector<std::string> failures(static_cast<size_t>(q_pairs + kv_pairs));
  auto check_row = [&](const GradientRow& want, const std::vector<float>& got, int64_t row_index, const char* tensor,
                       int heads, int64_t len, std::string* failure) {
    for (int d = 0; d < hd && failure->empty(); ++d) {
      const double value = got[row_index * hd + d];
      const double tol = gradient_tolerance(w.dtype, want.magnitude[d]);
      if (!(std::abs(value - want.value[d]) <= tol)) {
        *failure = spec.uri() + " " + element_name(tensor, row_index * hd + d, heads, len, hd) + " = " + value_text(value) +
                   ", float64 reference " + value_text(want.value[d]) + " (tolerance " + value_text(tol) + ")";
      }
    }
  };
  parallel_ranges(q_pairs + kv_pairs, [&](int64_t begin, int64_t end) {
    for (int64_t pair = begin; pair < end; ++pair) {
      std::string& failure = failures[pair];
      if (pair < q_pairs) {
        const int64_t b = pair / w.q_heads, h = pair % w.q_heads;
        for (int64_t row : q_rows) {
          if (!failure.empty()) break;
          check_row(reference_dq_row(host_, b, h, row), reference_.dq, pair * w.q_len + row, "dq", w.q_heads, w.q_len, &failure);
        }
      } else {
        const int64_t kv_pair = pair - q_pairs, b = kv_pair / w.kv_heads, kvh = kv_pair % w.kv_heads;
        for (int64_t key : keys) {
          if (!failure.empty()) break;
          GradientRow dk, dv;
          reference_dkv_row(host_, b, kvh, key, &dk, &dv);
          check_row(dk, reference_.dk, kv_pair * w.kv_len + key, "dk", w.kv_heads, w.kv_len, &failure);
          check_row(dv, reference_.dv, kv_pair * w.kv_len + key, "dv", w.kv_heads, w.kv_len, &failure);
        }
      }
    }
  });
  for (const std::string& f : failures) {
    if (!f.empty()) return {Disposition::kWrongResult, {}, f};
  }
  return {Disposition::kOk, {}, ""};
}

void GpuBackwardTimer::reset_set_zero() {
  InputSet& set = sets_.front();
  // dq is added to atomically, so it starts at zero; dk and dv are written by a chunk's first
  // step, so NaN marks any element the kernel leaves out.
  set.dq_acc.fill_bytes(0);
  set.dk_acc.poison();
  set.dv_acc.poison();
}

TimingOutcome GpuBackwardTimer::run_checked(const KernelSpec& spec, const CompiledKernel& kernel, Gradients* out) {
  InputSet& set = sets_.front();
  reset_set_zero();
  double check_ms = 0;
  try {
    check_ms = time_checked_launch_ms(spec, kernel, device_, stream_->get(),
                                      [&] { launch(spec, kernel, params_for(set, /*accumulate_dkv=*/false)); });
  } catch (const Error& e) {
    return launch_failure(e, /*infeasible_too=*/true);
  }
  if (out) {
    out->dq = set.dq_acc.download_as<float>();
    out->dk = set.dk_acc.download_as<float>();
    out->dv = set.dv_acc.download_as<float>();
  }
  TimingOutcome ok{Disposition::kOk, {}, ""};
  ok.check_ms = check_ms;
  return ok;
}

TimingOutcome GpuBackwardTimer::measure(const KernelSpec& spec, const CompiledKernel& kernel, int warmup, int runs,
                                        const RaceLimit& race) {
  use_primary_context(device_);
  const WorkloadKey& w = workload_;
  TimingOutcome checked = run_checked(spec, kernel, nullptr);
  if (checked.disposition != Disposition::kOk) return checked;
  if (TimingOutcome wrong = compare_with_reference(spec); wrong.disposition != Disposition::kOk) return wrong;

  // The checked launch writes dk and dv where a timed one of a later step adds to them, so it moves
  // no more memory: one above the race's cut is slower (once a second such launch, warm, confirms
  // it; dq keeps adding up, which changes no timing).
  if (auto stop = confirmed_stop_at_check(race, checked.check_ms, [&] {
        return time_checked_launch_ms(spec, kernel, device_, stream_->get(),
                                      [&] { launch(spec, kernel, params_for(sets_.front(), false)); });
      }))
    return *stop;

  // bwd-diagonal is the chunk's first step in the ring (its owner writes dk/dv); every other step
  // type adds to accumulators that earlier steps filled.
  const bool accumulate = w.step != StepType::kBwdDiagonal;

  // The accumulating path (accumulate_dkv: dk and dv read, added to and written back; a masked
  // block without queries leaves them alone), which the timed launches of such a step take and
  // the checked one does not, once the candidate may still win: the checked launch again, then an
  // accumulating one over the same inputs. dq adds up as always, so all three are twice the
  // reference config's. (A bwd-diagonal winner only ever writes: its checked launch is its path.)
  if (accumulate) {
    try {
      const InputSet& set = sets_.front();
      reset_set_zero();
      launch(spec, kernel, params_for(set, /*accumulate_dkv=*/false));
      launch(spec, kernel, params_for(set, /*accumulate_dkv=*/true));
      // A fault of the accumulating path shows here, as this candidate's.
      CPGEN_CU_CHECK(cu::driver().cuStreamSynchronize(stream_->get()));
    } catch (const Error& e) {
      return launch_failure(e, /*infeasible_too=*/true);
    }
    if (TimingOutcome wrong = compare_with_reference(spec, /*twice=*/true,
                                                     " after a writing launch and an accumulating one (accumulate_dkv)");
        wrong.disposition != Disposition::kOk)
      return wrong;
  }

  // Timing: the step's own mode, on rotating sets (a later step's accumulators hold zeros or
  // earlier runs).
  TimingOutcome result{Disposition::kOk, {}, ""};
  try {
    result.samples_ms = time_launches_ms(stream_->get(), warmup_launches(warmup, checked.check_ms), runs, race, [&](int i) {
      launch(spec, kernel, params_for(sets_[static_cast<size_t>(i) % sets_.size()], accumulate));
    }, &result.stopped_early);
  } catch (const Error& e) {
    result = launch_failure(e, /*infeasible_too=*/false);
  }
  return result;
}

TimingOutcome GpuBackwardTimer::compare_with_reference(const KernelSpec& spec, bool twice, const std::string& after) {
  const int times = twice ? 2 : 1;
  const WorkloadKey& w = workload_;
  const InputSet& set = sets_.front();
  const struct {
    const char* name;
    const DeviceBuffer* got;
    const DeviceBuffer* want;
    const std::vector<float>* want_host;
    int heads;
    int64_t len;
  } tensors[] = {{"dq", &set.dq_acc, &reference_dq_, &reference_.dq, w.q_heads, w.q_len},
                 {"dk", &set.dk_acc, &reference_dk_, &reference_.dk, w.kv_heads, w.kv_len},
                 {"dv", &set.dv_acc, &reference_dv_, &reference_.dv, w.kv_heads, w.kv_len}};
  const int hd = w.head_dim;
  for (const auto& t : tensors) {
    const int64_t rows = static_cast<int64_t>(t.want_host->size()) / hd;
    const int64_t at = compare_->run_gradient(*t.got, *t.want, rows, hd, gradient_agreement_relative(w.dtype),
                                              stream_->get(), static_cast<float>(times));
    if (at < 0) continue;
    // Only the disagreeing element comes to the host, for the message; its tolerance from want's row.
    const float got = t.got->element<float>(static_cast<size_t>(at));
    const double want = times * (*t.want_host)[at];
    const double tol =
        gradient_agreement_tolerance(w.dtype, want, times * row_rms(t.want_host->data() + at / hd * hd, hd));
    return {Disposition::kWrongResult, {}, spec.uri() + " " + element_name(t.name, at, t.heads, t.len, hd) + " = " +
                value_text(got) + after + (twice ? ", twice the reference config's " : ", reference config ") +
                value_text(want) + " (tolerance " + value_text(tol) + ")"};
  }
  return {Disposition::kOk, {}, ""};
}

void GpuBackwardTimer::end_workload() {
  sets_.clear();
  reference_ = {};
  reference_dq_ = DeviceBuffer();
  reference_dk_ = DeviceBuffer();
  reference_dv_ = DeviceBuffer();
  host_ = {};
  q_positions_ = DeviceBuffer();
  kv_positions_ = DeviceBuffer();
  q_key_first_ = DeviceBuffer();
  q_key_last_ = DeviceBuffer();
  useful_flops_ = 0;
}

}  // namespace cpgen
