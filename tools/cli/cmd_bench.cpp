// cpgen bench: the forward and backward rings on a GPU. Times the step kernel alone, the whole
// forward ring over --ranks virtual ranks (loopback) or processes (NCCL), the backward ring and
// forward + backward, and one single-GPU attention of the same total work by cpgen's own kernel;
// reports TFLOP/s (backward counted as 2.5x the forward's FLOPs, as FlashAttention does) and the
// ring's overhead, checks the ring's output against the float64 CPU reference on a slice of rows
// and that every gradient element was written. Without a GPU: exit 1, one line.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cpgen/error.h"
#include "cpgen/problem.h"
#include "runtime/core/json_text.h"
#include "runtime/core/problem_limits.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/api/gpu_bench.h"
#include "tools/cli/command.h"
#include "tools/cli/int_range.h"
#include "tools/cli/nccl_launch.h"
#include "cpgen/nccl_bootstrap.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/kernel_support.h"

namespace cpgen::cli {
namespace {

struct BenchArgs {
  std::string shape;
  int ranks = 8;
  std::string transport = "loopback";
  int device = 0;
  int warmup = 3;
  int iterations = 20;
  int check_rows = 32;
  bool json = false;
};

// value read whole by `read` (std::stoll, std::stod), or one line naming KEY=VALUE and `what` it
// is not.
template <typename Read>
auto parse_whole(const std::string& key, const std::string& value, const char* what, Read read) {
  size_t used = 0;
  decltype(read(value, &used)) v{};
  try {
    v = read(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty()) throw_bad_input("--shape: " + key + "=" + value + " is not " + what);
  return v;
}

int64_t parse_int(const std::string& key, const std::string& value) {
  return parse_whole(key, value, "an integer", [](const std::string& t, size_t* used) { return std::stoll(t, used); });
}

double parse_number(const std::string& key, const std::string& value) {
  const double v = parse_whole(key, value, "a finite number",
                               [](const std::string& t, size_t* used) { return std::stod(t, used); });
  if (!std::isfinite(v)) throw_bad_input("--shape: " + key + "=" + value + " is not a finite number");
  return v;
}

bool parse_bool(const std::string& key, const std::string& value) {
  if (value == "1" || value == "true") return true;
  if (value == "0" || value == "false") return false;
  throw_bad_input("--shape: " + key + "=" + value + " is not allowed; allowed: 1, 0, true, false");
}

}  // namespace

// "q_heads=32,kv_heads=8,head_dim=128,seq_len=32768,dtype=bf16,causal=1,scheme=zigzag,batch=1"
Problem parse_shape_argument(const std::string& text, int ranks) {
  Problem p;
  p.name = text;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.seq_len = 32768;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw_bad_input("--shape: '" + printable(item, 60) + "' is not KEY=VALUE; bench's --shape takes comma-separated "
                      "pairs, e.g. q_heads=32,kv_heads=8,seq_len=32768,causal=1 (plan, explain and verify take a JSON "
                      "object)");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "batch") p.batch = parse_int(key, value);
    else if (key == "q_heads") p.q_heads = parse_int(key, value);
    else if (key == "kv_heads") p.kv_heads = parse_int(key, value);
    else if (key == "head_dim") p.head_dim = parse_int(key, value);
    else if (key == "seq_len") p.seq_len = parse_int(key, value);
    else if (key == "dtype") p.dtype = parse_dtype(value);
    else if (key == "causal") p.causal = parse_bool(key, value);
    else if (key == "scheme") p.scheme = parse_scheme(value);
    else if (key == "softcap") p.softcap = parse_number(key, value);
    else
      throw_bad_input("--shape: unknown key '" + key +
                      "'; allowed: batch, q_heads, kv_heads, head_dim, seq_len, dtype, causal, scheme, softcap");
  }
  p.cp_size = ranks;
  p.validate();
  check_kernel_ring_problem(p);
  // The bench's sampled check finds each position's rank in closed form: equal shards only (the
  // library and verify take any length; the message says which options it is about).
  try {
    check_partitionable(p.scheme, p.seq_len, static_cast<int>(p.cp_size));
  } catch (const Error& e) {
    throw_bad_input("bench: --shape seq_len " + std::to_string(p.seq_len) + " over --ranks " +
                    std::to_string(p.cp_size) + ": " + e.what() +
                    " (bench checks equal shards only; verify and the library take any length)");
  }
  return p;
}

namespace {

// N processes, one NCCL rank each (nccl_launch.h); the ring time is the slowest rank's median.
gpu::BenchResult bench_nccl(const Problem& p, const BenchArgs& a, const gpu::BenchOptions& o) {
  if (!nccl_available())
    throw Error(ErrorKind::kNccl, "cpgen bench --transport nccl: cpgen was built without NCCL");
  std::vector<std::string> task = {"--task",  "bench", "--warmup", std::to_string(a.warmup), "--iters",
                                    std::to_string(a.iterations), "--check-rows", std::to_string(a.check_rows)};
  // Left out, as the user left it out (the defaults): cpgen refuses an empty value.
  if (!a.shape.empty()) task.insert(task.end(), {"--shape", a.shape});
  const std::vector<nlohmann::json> ranks = launch_nccl_ranks(a.ranks, task, 600);
  gpu::BenchResult r;
  gpu::SliceErrors e;
  for (const auto& j : ranks) {
    r.ring_ms = std::max(r.ring_ms, j["ring_ms"].get<double>());
    gpu::SliceErrors part;
    part.sq_diff = j["sq_diff"].get<double>() < 0 ? NAN : j["sq_diff"].get<double>();
    part.sq_ref = j["sq_ref"].get<double>();
    part.lse_max = j["lse_max"].get<double>() < 0 ? NAN : j["lse_max"].get<double>();
    part.rows = j["rows"].get<int>();
    part.nonfinite = j["nonfinite"].get<int64_t>();
    e.add(part);
    r.kernel_uri = j["kernel"].get<std::string>();
    r.config_source = j["config_source"].get<std::string>();
    r.backward_kernel_uri = j["backward_kernel"].get<std::string>();
    r.backward_ms = std::max(r.backward_ms, j["backward_ms"].get<double>());
    r.fwd_bwd_ms = std::max(r.fwd_bwd_ms, j["fwd_bwd_ms"].get<double>());
  }
  r.grads_finite = true;
  for (const auto& j : ranks) r.grads_finite = r.grads_finite && j["grads_finite"].get<bool>();
  r.checked_rows = e.rows;
  r.check_nonfinite = e.nonfinite;
  r.check_out_error = e.relative();
  r.check_lse_error = e.lse_max;
  r.check_passed = e.passed();
  std::vector<int64_t> all(p.seq_len);
  for (int64_t i = 0; i < p.seq_len; ++i) all[i] = i;
  r.useful_flops = 4.0 * static_cast<double>(p.head_dim * p.batch * p.q_heads) * gpu::visible_pairs(all, all, p.causal);
  r.ring_tflops = r.useful_flops / (r.ring_ms * 1e-3) / 1e12;
  r.backward_tflops = gpu::kBackwardFlopsFactor * r.useful_flops / (r.backward_ms * 1e-3) / 1e12;
  r.fwd_bwd_tflops = (1 + gpu::kBackwardFlopsFactor) * r.useful_flops / (r.fwd_bwd_ms * 1e-3) / 1e12;
  r.single_ms = gpu::time_single_attention(p, gpu::bench_inputs(p, 1), o, &r.single_kernel_uri);
  r.single_tflops = r.useful_flops / (r.single_ms * 1e-3) / 1e12;
  r.overhead = r.ring_ms / r.single_ms - 1;
  r.steps_note = "timed on the loopback ring only";
  return r;  // the step kernel alone is timed by the loopback run (step_ms 0 here)
}

void run_bench(const BenchArgs& a) {
  const Problem p = parse_shape_argument(a.shape, a.ranks);
  if (a.transport != "loopback" && a.transport != "nccl")
    throw_bad_input("--transport " + a.transport + " is not supported; allowed: loopback, nccl");
  std::string why;
  if (!cu::try_driver(&why)) throw Error(ErrorKind::kNoDevice, "cpgen bench needs a GPU: " + why);
  gpu::BenchOptions o;
  o.device = a.device;
  o.warmup = a.warmup;
  o.iterations = a.iterations;
  o.check_rows = a.check_rows;
  if (!a.json)
    std::cerr << "cpgen bench: " << a.ranks << " ranks over " << a.transport << ", compiling and timing...\n";
  const gpu::BenchResult r = a.transport == "nccl" ? bench_nccl(p, a, o) : gpu::bench_loopback(p, o);
  if (a.json) {
    nlohmann::json step_types = nlohmann::json::array();
    for (const gpu::StepTypeTimes& t : r.step_types)
      step_types.push_back({{"step_type", t.step_type}, {"kernel", t.kernel_uri}, {"launches", t.launches}, {"ms", t.ms}});
    nlohmann::json j = {{"shape", a.shape},
                        {"ranks", a.ranks},
                        {"transport", a.transport},
                        {"kernel", r.kernel_uri},
                        {"config_source", r.config_source},
                        {"useful_flops", r.useful_flops},
                        {"ring_ms", r.ring_ms},
                        {"ring_tflops", r.ring_tflops},
                        {"single_ms", r.single_ms},
                        {"single_kernel", r.single_kernel_uri},
                        {"single_tflops", r.single_tflops},
                        {"step_ms", r.step_ms},
                        {"step_tflops", r.step_tflops},
                        {"overhead", r.overhead},
                        {"steps_alone_ms", r.steps_alone_ms},
                        {"step_types", step_types},
                        {"steps_note", r.steps_note},
                        {"backward_kernel", r.backward_kernel_uri},
                        {"backward_ms", r.backward_ms},
                        {"backward_tflops", r.backward_tflops},
                        {"fwd_bwd_ms", r.fwd_bwd_ms},
                        {"fwd_bwd_tflops", r.fwd_bwd_tflops},
                        {"check", {{"rows", r.checked_rows},
                                   {"out_rel_error", r.check_out_error},
                                   {"lse_max_abs_error", r.check_lse_error},
                                   {"nonfinite", r.check_nonfinite},
                                   {"passed", r.check_passed},
                                   {"grads_finite", r.grads_finite}}}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("shape      %s, %d ranks (%s)\n", a.shape.c_str(), a.ranks, a.transport.c_str());
    std::printf("kernel     %s (%s)\n", r.kernel_uri.c_str(), r.config_source.c_str());
    if (r.step_ms > 0)
      std::printf("step       %.3f ms  %.1f TFLOP/s (rank 0, step 0)\n", r.step_ms, r.step_tflops);
    std::printf("ring       %.3f ms  %.1f TFLOP/s\n", r.ring_ms, r.ring_tflops);
    std::printf("single     %.3f ms  %.1f TFLOP/s (one attention, same total work: %s)\n", r.single_ms,
                r.single_tflops, r.single_kernel_uri.c_str());
    std::printf("overhead   %+.2f%%\n", 100 * r.overhead);
    if (r.steps_alone_ms > 0) {
      // The overhead in two parts: the per-step kernels alone against one kernel, and the ring
      // (ranks and copies together) against its launches one after another.
      std::printf("steps      %.3f ms alone, one after another (%.3fx single; the ring takes %.3fx of it)\n",
                  r.steps_alone_ms, r.steps_alone_ms / r.single_ms, r.ring_ms / r.steps_alone_ms);
      for (const gpu::StepTypeTimes& t : r.step_types)
        std::printf("  %-15s %3d launches  %.3f ms  %s\n", t.step_type.c_str(), t.launches, t.ms, t.kernel_uri.c_str());
    } else if (!r.steps_note.empty()) {
      std::printf("steps      %s\n", r.steps_note.c_str());
    }
    std::printf("backward   %.3f ms  %.1f TFLOP/s (2.5x forward FLOPs; %s)\n", r.backward_ms, r.backward_tflops,
                r.backward_kernel_uri.c_str());
    std::printf("fwd+bwd    %.3f ms  %.1f TFLOP/s (3.5x forward FLOPs)\n", r.fwd_bwd_ms, r.fwd_bwd_tflops);
    std::printf("check      %s: %d rows, out rel error %.2e, lse max error %.2e, %lld elements unwritten\n",
                r.check_passed ? "ok" : "FAILED", r.checked_rows, r.check_out_error, r.check_lse_error,
                static_cast<long long>(r.check_nonfinite));
  }
  if (!r.check_passed) {
    std::cerr << "cpgen bench: the ring's output does not match the CPU reference\n";
    set_exit_code(1);
  }
  if (!r.grads_finite) {
    std::cerr << "cpgen bench: the backward left gradient elements unwritten or not finite\n";
    set_exit_code(1);
  }
}

const CommandRegistrar kBench("bench", [](CLI::App& root) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = root.add_subcommand(
      "bench", "Time the forward and backward rings on a GPU against one attention of the same total work");
  cmd->add_option("--shape", args->shape,
                  "KEY=VALUE,... of batch, q_heads, kv_heads, head_dim, seq_len, dtype, causal, "
                  "scheme, softcap (defaults: 1, 32, 8, 128, 32768, bf16, 1, zigzag, none; softcap=C: logits "
                  "C tanh(logit / C))");
  cmd->add_option("--ranks", args->ranks, "context-parallel ranks (cp_size)")->check(int_range(1, kMaxCpSize));
  cmd->add_option("--transport", args->transport, "loopback (N virtual ranks on one GPU) or nccl");
  cmd->add_option("--device", args->device, "CUDA device ordinal")->check(int_range(0, 1023));
  cmd->add_option("--warmup", args->warmup, "untimed runs first")->check(CLI::Range(0, 1000));
  cmd->add_option("--iters", args->iterations, "timed runs (median reported)")->check(CLI::Range(1, 100000));
  cmd->add_option("--check-rows", args->check_rows, "rows checked against the CPU reference per head")
      ->check(CLI::Range(2, 4096));
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->callback([args] { run_bench(*args); });
});

}  // namespace
}  // namespace cpgen::cli
