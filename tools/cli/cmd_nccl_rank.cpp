// cpgen _nccl-rank: one rank of an NCCL ring started by launch_nccl_ranks (nccl_launch.h) for
// `cpgen verify --transport nccl` and `cpgen bench --transport nccl`. Hidden from --help; it
// writes its result as JSON to --result.
#include <fstream>
#include <nlohmann/json.hpp>

#include "cpgen/error.h"
#include "cpgen/nccl_bootstrap.h"
#include "cpgen/ring_attention.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/api/gpu_bench.h"
#include "runtime/api/gpu_ring_run.h"
#include "runtime/cuda/gpu_stream.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/vectors.h"
#include "tools/cli/command.h"

namespace cpgen::cli {

Problem parse_shape_argument(const std::string& text, int ranks);  // cmd_bench.cpp

namespace {

struct RankArgs {
  std::string task, vectors, shape, scheme = "zigzag", dtype = "bf16", id_file, result;
  int rank = 0, nranks = 1, warmup = 3, iterations = 20, check_rows = 32;
  double watchdog = 300;
};

// Comm on device rank % device_count, through the id file (rank 0 writes it).
void* make_comm(const RankArgs& a) {
  NcclFileBootstrap boot;
  boot.path = a.id_file;
  boot.rank = a.rank;
  boot.nranks = a.nranks;
  boot.device = a.rank % std::max(1, cu::device_count());
  boot.timeout_seconds = 120;
  return nccl_comm_from_file(boot);
}

nlohmann::json run_verify(const RankArgs& a, void* comm) {
  AttentionVectors vec = load_attention_vectors(a.vectors);
  const Scheme scheme = parse_scheme(a.scheme);
  const Problem p = problem_from_vectors(vec, a.nranks, scheme, parse_dtype(a.dtype));
  std::vector<float> q(vec.q.begin(), vec.q.end()), k(vec.k.begin(), vec.k.end()), v(vec.v.begin(), vec.v.end());
  std::vector<float> out, lse;
  RingOptions options;
  options.watchdog_seconds = a.watchdog;
  // The backward too when the file has gradients to check it against.
  const bool backward = !vec.dq.empty() && !vec.dout.empty();
  const std::vector<float> dout(vec.dout.begin(), vec.dout.end());
  gpu::RankGrads grads;
  gpu::run_gpu_ring_nccl_rank(p, comm, q, k, v, options, out, lse, backward ? &dout : nullptr,
                              backward ? &grads : nullptr);
  // This rank's rows of a whole tensor, split as the ring split its inputs: with documents, each
  // document on its own (without them the expected rows were another split's, and out was read
  // past their end).
  const auto shard_of = [&](const std::vector<double>& full, int64_t heads, int64_t dim) {
    return scatter_shard(full, p.batch, heads, p.seq_len, dim, p.scheme, a.nranks, a.rank, p.documents);
  };
  const std::vector<double> want_out = shard_of(vec.out, p.q_heads, p.head_dim);
  const std::vector<double> want_lse = shard_of(vec.lse, p.q_heads, 1);
  double sq_diff = 0, sq_ref = 0, lse_max = 0;
  for (size_t i = 0; i < out.size() && i < want_out.size(); ++i) {
    sq_diff += (out[i] - want_out[i]) * (out[i] - want_out[i]);
    sq_ref += want_out[i] * want_out[i];
  }
  for (size_t i = 0; i < lse.size() && i < want_lse.size(); ++i) {
    const double err = std::isinf(want_lse[i]) && lse[i] == want_lse[i] ? 0 : std::abs(lse[i] - want_lse[i]);
    lse_max = std::isnan(err) || std::isnan(lse_max) ? NAN : std::max(lse_max, err);
  }
  // Rows of another count are a failure (-1 below), never a comparison of what happens to align.
  if (out.size() != want_out.size() || lse.size() != want_lse.size()) sq_diff = NAN;
  if (std::isnan(sq_diff)) lse_max = NAN;
  nlohmann::json result = {{"rank", a.rank}, {"sq_diff", std::isnan(sq_diff) ? -1.0 : sq_diff}, {"sq_ref", sq_ref},
                           {"lse_max", std::isnan(lse_max) ? -1.0 : lse_max}};
  if (!backward) return result;
  // Sums of squares per gradient; -1 marks a NaN (an element never written), as for out.
  const auto sums = [&](const std::vector<float>& got, const std::vector<double>& full, int64_t heads) {
    const std::vector<double> want = shard_of(full, heads, p.head_dim);
    double d = 0, r = 0;
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
      d += (got[i] - want[i]) * (got[i] - want[i]);
      r += want[i] * want[i];
    }
    if (got.size() != want.size()) d = NAN;
    return nlohmann::json{{"sq_diff", std::isnan(d) ? -1.0 : d}, {"sq_ref", r}};
  };
  result["grads"] = {{"dq", sums(grads.dq, vec.dq, p.q_heads)},
                     {"dk", sums(grads.dk, vec.dk, p.kv_heads)},
                     {"dv", sums(grads.dv, vec.dv, p.kv_heads)}};
  return result;
}

nlohmann::json run_bench(const RankArgs& a, void* comm) {
  const Problem p = parse_shape_argument(a.shape, a.nranks);
  const gpu::BenchInputs in = gpu::bench_inputs(p, 1);
  RingOptions options;
  options.watchdog_seconds = a.watchdog;
  RingAttention ring = RingAttention::nccl(p, comm, options);
  gpu::DeviceShard shard = gpu::upload_shard(p, ring.rank(), ring.device(), in.q, in.k, in.v);
  const ShardPointers s = shard.pointers();
  gpu::Stream stream;
  const double ms = gpu::time_on_stream_ms(stream.get(), a.warmup, a.iterations, [&] {
    ring.forward(s.q, s.k, s.v, s.out, s.lse, stream.get());
  });
  ring.synchronize();
  gpu::poison_outputs(p, shard);
  ring.forward(s.q, s.k, s.v, s.out, s.lse, stream.get());
  ring.synchronize();
  std::vector<std::vector<float>> outs(a.nranks), lses(a.nranks);
  gpu::download_outputs(p, shard, outs[a.rank], lses[a.rank]);
  const gpu::SliceErrors e =
      gpu::check_slice(p, in, outs, lses, a.rank, gpu::check_positions(p.seq_len, a.check_rows));
  // Backward, on the forward's out and lse; the first call loads the kernels, outside the timing.
  gpu::upload_backward(p, ring.rank(), gpu::bench_dout(p, 1), shard);
  const BackwardShardPointers b = shard.backward_pointers();
  const auto backward = [&] { ring.backward(b.q, b.k, b.v, b.out, b.lse, b.dout, b.dq, b.dk, b.dv, stream.get()); };
  backward();
  ring.synchronize();
  const double backward_ms = gpu::time_on_stream_ms(stream.get(), a.warmup, a.iterations, backward);
  const double fwd_bwd_ms = gpu::time_on_stream_ms(stream.get(), a.warmup, a.iterations, [&] {
    ring.forward(s.q, s.k, s.v, s.out, s.lse, stream.get());
    backward();
  });
  ring.synchronize();
  shard.dq.poison();
  shard.dk.poison();
  shard.dv.poison();
  backward();
  ring.synchronize();
  std::vector<float> dq, dk, dv;
  gpu::download_grads(p, shard, dq, dk, dv);
  bool finite = true;
  for (const auto* g : {&dq, &dk, &dv})
    for (float x : *g) finite = finite && std::isfinite(x);
  return {{"rank", a.rank}, {"kernel", ring.kernel_uri()}, {"config_source", ring.config_source()},
          {"ring_ms", ms}, {"sq_diff", std::isnan(e.sq_diff) ? -1.0 : e.sq_diff}, {"sq_ref", e.sq_ref},
          {"lse_max", std::isnan(e.lse_max) ? -1.0 : e.lse_max}, {"rows", e.rows}, {"nonfinite", e.nonfinite},
          {"backward_kernel", ring.backward_step_kernels().front().kernel_uri}, {"backward_ms", backward_ms},
          {"fwd_bwd_ms", fwd_bwd_ms}, {"grads_finite", finite}};
}

void run_rank(const RankArgs& a) {
  void* comm = make_comm(a);
  nlohmann::json result;
  if (a.task == "verify") result = run_verify(a, comm);
  else if (a.task == "bench") result = run_bench(a, comm);
  else throw_bad_input("_nccl-rank: --task " + a.task + " is not allowed; allowed: verify, bench");
  nccl_comm_destroy(comm);
  std::ofstream out(a.result);
  out << result.dump() << "\n";
  if (!out) throw Error(ErrorKind::kIo, "cannot write " + a.result);
}

const CommandRegistrar kNcclRank("_nccl-rank", [](CLI::App& root) {
  auto a = std::make_shared<RankArgs>();
  CLI::App* cmd = root.add_subcommand("_nccl-rank", "One rank of an NCCL ring (internal)");
  cmd->group("");  // hidden
  cmd->add_option("--task", a->task)->required();
  cmd->add_option("--vectors", a->vectors);
  cmd->add_option("--shape", a->shape);
  cmd->add_option("--scheme", a->scheme);
  cmd->add_option("--dtype", a->dtype);
  cmd->add_option("--rank", a->rank)->required();
  cmd->add_option("--nranks", a->nranks)->required();
  cmd->add_option("--id-file", a->id_file)->required();
  cmd->add_option("--result", a->result)->required();
  cmd->add_option("--warmup", a->warmup);
  cmd->add_option("--iters", a->iterations);
  cmd->add_option("--check-rows", a->check_rows);
  cmd->add_option("--watchdog", a->watchdog);
  cmd->callback([a] { run_rank(*a); });
});

}  // namespace
}  // namespace cpgen::cli
