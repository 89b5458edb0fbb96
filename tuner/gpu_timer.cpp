#include "tuner/gpu_timer.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <cmath>
#include <cstdio>

#include "cpgen/compare.cuh"
#include "cpgen/error.h"
#include "generator/kernel_spec.h"
#include "runtime/core/half_convert.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/backend/gpu_step_kernel.h"
#include "runtime/cuda/module.h"
#include "tuner/event_timing.h"
#include "tuner/input_sets.h"
#include "tuner/parallel_for.h"
#include "tuner/tuner.h"

namespace cpgen {
namespace {

std::string describe_element(int64_t b, int64_t h, int64_t row, int64_t d) {
  return "[b" + std::to_string(b) + " h" + std::to_string(h) + " row " + std::to_string(row) + " d" + std::to_string(d) + "]";
}

std::string value_text(double x) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

}  // namespace

double GpuTimer::output_tolerance(Dtype dtype) {
  // Outputs are convex combinations of values in [-1, 1]. Rounding P to the input type before PV
  // moves the result by at most one half-ulp relative (sum of |dP| <= u/2 * sum P), and the final
  // rounding by another half-ulp: u = ulp_at_one, 2^-7 for bf16 and 2^-10 for fp16. Twice that
  // bound leaves room for fp32 accumulation order.
  return 2 * ulp_at_one(dtype);
}

double GpuTimer::lse_tolerance(double lse) { return kLseAbsolute + kLseRelative * std::abs(lse); }

bool GpuTimer::lse_agrees(double got, double want) {
  // The rule the candidates' check runs on the GPU (compare.cuh), with this check's tolerances.
  return device::lses_agree(static_cast<float>(got), static_cast<float>(want), static_cast<float>(kLseAbsolute),
                            static_cast<float>(kLseRelative));
}

GpuTimer::GpuTimer(int device) : device_(device) {
  use_primary_context(device_);
  stream_ = std::make_unique<gpu::Stream>();
  work_counter_ = DeviceBuffer(device_, sizeof(unsigned));
}

GpuTimer::~GpuTimer() {
  // The stream and the input sets belong to the device's primary context.
  use_primary_context(device_);
  backward_.reset();
  stream_.reset();
}

RingFwdParams GpuTimer::params_for(const InputSet& set, bool first, bool last) const {
  const WorkloadKey& w = workload_;
  const int64_t hd = w.head_dim;
  RingFwdParams p{};
  p.q = set.q.as<void>();
  p.k = set.k.as<void>();
  p.v = set.v.as<void>();
  p.out = set.out.as<void>();
  p.lse = set.lse.as<float>();
  p.o_state = set.o_state.as<float>();
  p.m_state = set.m_state.as<float>();
  p.l_state = set.l_state.as<float>();
  p.q_positions = q_positions_.as<const int>();
  p.kv_positions = kv_positions_.as<const int>();
  // A masked workload's candidates are all specialized on its mask (tuner/candidates.h).
  if (w.mask.key_intervals()) {
    p.q_key_first = q_key_first_.as<const int>();
    p.q_key_last = q_key_last_.as<const int>();
  }
  p.softcap = static_cast<float>(mask_.softcap);
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.out_row_stride = hd;
  p.q_head_stride = p.out_head_stride = w.q_len * hd;
  p.k_head_stride = p.v_head_stride = w.kv_len * hd;
  p.q_batch_stride = p.out_batch_stride = w.q_heads * w.q_len * hd;
  p.k_batch_stride = p.v_batch_stride = w.kv_heads * w.kv_len * hd;
  p.batch = w.batch;
  p.q_heads = w.q_heads;
  p.kv_heads = w.kv_heads;
  p.q_len = static_cast<int>(w.q_len);
  p.kv_len = static_cast<int>(w.kv_len);
  // Peaked scores (forward_timing_mask): the check then sees outputs of the values' size. What a
  // launch costs does not depend on the scale.
  p.scale_log2 = static_cast<float>(mask_.scale * M_LOG2E);
  p.is_first_step = first ? 1 : 0;
  p.is_last_step = last ? 1 : 0;
  return p;
}

void GpuTimer::launch(const KernelSpec& spec, const CompiledKernel& kernel, const RingFwdParams& params) {
  const LoadedKernel& loaded = load_kernel(kernel, device_);
  const Feasibility f = check_feasibility(spec, kernel.arch);
  loaded.reserve_dynamic_shared(f.shared_bytes);
  // The ring's own launch (grid, block, and for the wgmma family the tensor maps), so a timed
  // candidate runs exactly as the ring would run it.
  gpu::launch_forward_kernel(spec, loaded, f.shared_bytes, params, stream_->get(), work_counter_.as<unsigned>());
}

TimingOutcome GpuTimer::begin_workload(const WorkloadKey& w, const KernelSpec& reference_spec, const CompiledKernel& reference) {
  end_workload();
  if (is_backward(w.step)) {
    if (!backward_) backward_ = std::make_unique<GpuBackwardTimer>(device_);
    backward_active_ = true;
    return backward_->begin_workload(w, reference_spec, reference);
  }
  use_primary_context(device_);
  const cu::DriverApi& api = cu::driver();
  workload_ = w;
  positions_ = step_positions(w);
  mask_ = forward_timing_mask(w, positions_);
  useful_flops_ = 4.0 * static_cast<double>(visible_pairs(positions_, mask_)) * w.head_dim * w.batch * w.q_heads;
  q_positions_ = DeviceBuffer::from_host(device_, positions_.q);
  kv_positions_ = DeviceBuffer::from_host(device_, positions_.kv);
  if (w.mask.key_intervals()) {
    const StepKeyIntervals intervals = step_key_intervals(mask_, positions_);
    q_key_first_ = DeviceBuffer::from_host(device_, intervals.first);
    q_key_last_ = DeviceBuffer::from_host(device_, intervals.last);
  } else {
    q_key_first_ = DeviceBuffer();
    q_key_last_ = DeviceBuffer();
  }

  const size_t q_elems = static_cast<size_t>(w.batch) * w.q_heads * w.q_len * w.head_dim;
  const size_t kv_elems = static_cast<size_t>(w.batch) * w.kv_heads * w.kv_len * w.head_dim;
  const size_t rows = static_cast<size_t>(w.batch) * w.q_heads * w.q_len;
  const size_t set_bytes = q_elems * 2 * 2 + kv_elems * 2 * 2 + q_elems * 4 + rows * 4 * 3;
  const size_t count = device_input_set_count(device_, set_bytes, "input set of " + w.describe());
  // Set 0 gets random values; the others are device copies of it. L2 caches by address, so a
  // copy at another address is as cold as fresh data, and filling it costs no host time.
  // k/64 values in [-1, 1], exact in both 16-bit types (step_inputs.h), drawn in parallel
  // straight into 16 bits: at a 32K step the inputs are hundreds of millions of values. The
  // float64 check below needs every key and value of a head, but only the queries of the rows
  // it checks (drawn there).
  const uint64_t seed = timing_seed(w);
  host_k_ = grid_values(seed, kInputK, kv_elems);
  host_v_ = grid_values(seed, kInputV, kv_elems);
  for (size_t s = 0; s < count; ++s) {
    InputSet set;
    if (s == 0) {
      set.q = DeviceBuffer::from_host(device_, grid_bits(seed, kInputQ, q_elems, w.dtype));
      set.k = DeviceBuffer::from_host(device_, grid_bits(seed, kInputK, kv_elems, w.dtype));
      set.v = DeviceBuffer::from_host(device_, grid_bits(seed, kInputV, kv_elems, w.dtype));
    } else {
      set.q = sets_[0].q.copy();
      set.k = sets_[0].k.copy();
      set.v = sets_[0].v.copy();
    }
    set.out = DeviceBuffer(device_, q_elems * 2);
    set.lse = DeviceBuffer(device_, rows * 4);
    set.o_state = DeviceBuffer(device_, q_elems * 4);
    set.m_state = DeviceBuffer(device_, rows * 4);
    set.l_state = DeviceBuffer(device_, rows * 4);
    sets_.push_back(std::move(set));
  }
  CPGEN_CU_CHECK(api.cuCtxSynchronize());

  TimingOutcome check = run_checked(reference_spec, reference);
  if (check.disposition != Disposition::kOk) return check;
  reference_out_ = sets_.front().out.download_as<uint16_t>();
  reference_lse_ = sets_.front().lse.download_as<float>();
  if (!compare_) compare_ = std::make_unique<GpuCompare>(device_);
  // A device copy for the candidates' check (set 0's out and lse are poisoned again for each).
  reference_out_dev_ = sets_.front().out.copy();
  reference_lse_dev_ = sets_.front().lse.copy();
  // What three steps over the same keys give (measure's merge check): each lse plus ln 3; a row
  // that sees no key keeps -inf.
  reference_lse_merged_ = reference_lse_;
  for (float& lse : reference_lse_merged_) lse += static_cast<float>(std::log(3.0));
  reference_lse_merged_dev_ = DeviceBuffer::from_host(device_, reference_lse_merged_);
  // The reference against float64, on a spread of rows: first and last rows of each head (the
  // mask's edges) and a stride through the middle, over every (batch, head).
  const double tol = output_tolerance(w.dtype);
  const int64_t stride = std::max<int64_t>(1, w.q_len / 8);
  std::vector<int64_t> rows_checked;
  for (int64_t row = 0; row < w.q_len; row += stride) rows_checked.push_back(row);
  if (rows_checked.back() != w.q_len - 1) rows_checked.push_back(w.q_len - 1);
  // One failure message per (batch, head); the first in order is reported.
  std::vector<std::string> failures(static_cast<size_t>(w.batch * w.q_heads));
  parallel_ranges(w.batch * w.q_heads, [&](int64_t begin, int64_t end) {
    std::vector<double> out(w.head_dim);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / w.q_heads, h = bh % w.q_heads, kvh = h / w.gqa_group();
      const double* k = host_k_.data() + (b * w.kv_heads + kvh) * w.kv_len * w.head_dim;
      const double* v = host_v_.data() + (b * w.kv_heads + kvh) * w.kv_len * w.head_dim;
      for (int64_t row : rows_checked) {
        const size_t row_index = bh * w.q_len + row;
        const std::vector<double> q = grid_values_at(seed, kInputQ, row_index * w.head_dim, w.head_dim);
        double lse = 0;
        reference_row(q.data(), k, v, w.kv_len, w.head_dim, mask_, positions_.q[row], positions_.kv, out.data(), &lse);
        for (int64_t d = 0; d < w.head_dim && failures[bh].empty(); ++d) {
          const double got = decode_16(reference_out_[row_index * w.head_dim + d], w.dtype);
          if (!(std::abs(got - out[d]) <= tol)) {
            failures[bh] = reference_spec.uri() + " out" + describe_element(b, h, row, d) + " = " + value_text(got) +
                           ", float64 reference " + value_text(out[d]) + " (tolerance " + value_text(tol) + ")";
          }
        }
        if (failures[bh].empty() && !lse_agrees(reference_lse_[row_index], lse)) {
          failures[bh] = reference_spec.uri() + " lse" + describe_element(b, h, row, 0) + " = " +
                         value_text(reference_lse_[row_index]) + ", float64 reference " + value_text(lse);
        }
        if (!failures[bh].empty()) break;
      }
    }
  });
  for (const std::string& f : failures) {
    if (!f.empty()) return {Disposition::kWrongResult, {}, f};
  }
  return {Disposition::kOk, {}, ""};
}

void GpuTimer::poison_set_zero() {
  InputSet& set = sets_.front();
  set.out.poison();
  set.lse.poison();
  set.o_state.poison();
  set.m_state.poison();
  set.l_state.poison();
}

TimingOutcome GpuTimer::compare_to_reference(const KernelSpec& spec, const DeviceBuffer& lse_want,
                                             const std::vector<float>& lse_want_host, const std::string& after,
                                             const std::string& lse_want_is) {
  const WorkloadKey& w = workload_;
  const double tol = 2 * output_tolerance(w.dtype);
  const InputSet& set = sets_.front();
  const int64_t n_out = static_cast<int64_t>(reference_out_.size()), n_lse = static_cast<int64_t>(lse_want_host.size());
  const Disagreement bad = compare_->run(set.out, reference_out_dev_, n_out, tol, w.dtype, set.lse, lse_want, n_lse,
                                         2 * kLseAbsolute, 2 * kLseRelative, stream_->get());
  const int64_t hd = w.head_dim;
  if (bad.out >= 0) {
    const int64_t i = bad.out, row_index = i / hd;
    const uint16_t got = set.out.element<uint16_t>(static_cast<size_t>(i));
    return {Disposition::kWrongResult, {}, spec.uri() + " out" +
                describe_element(row_index / (w.q_heads * w.q_len), row_index / w.q_len % w.q_heads, row_index % w.q_len, i % hd) +
                " = " + value_text(decode_16(got, w.dtype)) + after + ", reference config " +
                value_text(decode_16(reference_out_[i], w.dtype)) + " (tolerance " + value_text(tol) + ")"};
  }
  if (bad.lse >= 0) {
    const float got = set.lse.element<float>(static_cast<size_t>(bad.lse));
    return {Disposition::kWrongResult, {}, spec.uri() + " lse row " + std::to_string(bad.lse) + " = " + value_text(got) +
                                               after + ", reference config" + lse_want_is + " " +
                                               value_text(lse_want_host[bad.lse])};
  }
  return {Disposition::kOk, {}, ""};
}

TimingOutcome GpuTimer::run_checked(const KernelSpec& spec, const CompiledKernel& kernel) {
  InputSet& set = sets_.front();
  poison_set_zero();
  double check_ms = 0;
  try {
    check_ms = time_checked_launch_ms(spec, kernel, device_, stream_->get(),
                                      [&] { launch(spec, kernel, params_for(set, true, true)); });
  } catch (const Error& e) {
    return launch_failure(e, /*infeasible_too=*/true);
  }
  TimingOutcome ok{Disposition::kOk, {}, ""};
  ok.check_ms = check_ms;
  return ok;
}

TimingOutcome GpuTimer::measure(const KernelSpec& spec, const CompiledKernel& kernel, int warmup, int runs,
                                const RaceLimit& race) {
  if (backward_active_) return backward_->measure(spec, kernel, warmup, runs, race);
  use_primary_context(device_);
  const WorkloadKey& w = workload_;
  TimingOutcome checked = run_checked(spec, kernel);
  if (checked.disposition != Disposition::kOk) return checked;
  // Every element against the reference config, on the GPU; a poisoned (NaN) element was never
  // written. Only a disagreeing element comes to the host, for the message.
  if (TimingOutcome wrong = compare_to_reference(spec, reference_lse_dev_, reference_lse_, "", "");
      wrong.disposition != Disposition::kOk)
    return wrong;
  // The checked launch (first and last step: no state read, out and lse written in place of the
  // fp32 state) moves no more memory than a timed one, so one above the race's cut is slower
  // (once a second such launch, warm, confirms it).
  if (auto stop = confirmed_stop_at_check(race, checked.check_ms, [&] {
        return time_checked_launch_ms(spec, kernel, device_, stream_->get(),
                                      [&] { launch(spec, kernel, params_for(sets_.front(), true, true)); });
      }))
    return *stop;

  // The merge paths, which the single step never takes (it neither reads nor writes the fp32
  // state), once the candidate may still win: three steps over the same keys, a first that
  // writes the state, a middle that reads, merges and writes it back (the path every timed launch
  // of a later step takes, with code of its own: a block without key tiles leaves its rows alone
  // there) and a last that writes out and lse. They see every score three times, so their out is
  // the single step's and their lse is its plus ln 3.
  try {
    poison_set_zero();
    launch(spec, kernel, params_for(sets_.front(), true, false));
    launch(spec, kernel, params_for(sets_.front(), false, false));
    launch(spec, kernel, params_for(sets_.front(), false, true));
    // A fault of the merge path (a wrong state row, say) shows here, as this candidate's.
    CPGEN_CU_CHECK(cu::driver().cuStreamSynchronize(stream_->get()));
  } catch (const Error& e) {
    return launch_failure(e, /*infeasible_too=*/true);
  }
  if (TimingOutcome wrong = compare_to_reference(spec, reference_lse_merged_dev_, reference_lse_merged_,
                                                 " after three steps over the same keys (first, middle, last)",
                                                 " (its lse + ln 3)");
      wrong.disposition != Disposition::kOk)
    return wrong;

  // Timing. The diagonal step opens a ring (first step: state starts empty); every other step
  // merges into state from earlier steps, so those sets get one initializing launch first.
  const bool first = w.step == StepType::kDiagonal;
  TimingOutcome result{Disposition::kOk, {}, ""};
  try {
    if (!first) {
      for (const InputSet& set : sets_) launch(spec, kernel, params_for(set, true, false));
    }
    result.samples_ms = time_launches_ms(stream_->get(), warmup_launches(warmup, checked.check_ms), runs, race, [&](int i) {
      launch(spec, kernel, params_for(sets_[static_cast<size_t>(i) % sets_.size()], first, false));
    }, &result.stopped_early);
  } catch (const Error& e) {
    result = launch_failure(e, /*infeasible_too=*/false);
  }
  return result;
}

void GpuTimer::end_workload() {
  if (backward_) backward_->end_workload();
  backward_active_ = false;
  sets_.clear();
  reference_out_.clear();
  reference_lse_.clear();
  reference_lse_merged_.clear();
  host_k_.clear();
  host_v_.clear();
  reference_out_dev_ = DeviceBuffer();
  reference_lse_dev_ = DeviceBuffer();
  reference_lse_merged_dev_ = DeviceBuffer();
}

std::unique_ptr<CandidateTimer> make_gpu_timer_if_present(int device) {
  if (!cu::try_driver() || cu::device_count() <= device) return nullptr;
  return std::make_unique<GpuTimer>(device);
}

}  // namespace cpgen
