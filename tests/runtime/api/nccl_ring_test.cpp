// The forward ring over real NCCL, with 2 and 4 processes sharing one GPU. NCCL refuses two
// ranks on one device of one host, so each child process gets its own NCCL_HOSTID (NCCL then
// treats them as separate hosts and talks over sockets on the loopback interface: slow, but real
// NCCL). The children are this test binary re-run with --gtest_filter=NcclRingWorker.Run and
// their role in CPGEN_NCCL_* variables; the id travels through nccl_comm_from_file.
#include <gtest/gtest.h>

#ifdef CPGEN_HAVE_NCCL

#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <thread>

#include "cpgen/error.h"
#include "cpgen/nccl_bootstrap.h"
#include "runtime/api/gpu_ring_run.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gpu_stream.h"
#include "runtime/cuda/module.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/vectors.h"
#include "test_util.h"
#include "tests/runtime/api/gpu_ring_check.h"
#include "tests/temp_dir.h"

extern char** environ;

namespace cpgen {
namespace {

std::string env_or(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// Runs `nranks` children and waits for all of them (killing the rest after `timeout_s`).
// Returns each child's exit code (128 + signal when killed).
// A job's processes get this long (below the 180 s per-test limit, so the test ends them itself
// rather than being killed with them still running); each also dies with the test (PDEATHSIG).
constexpr int kChildSeconds = 150;

std::vector<int> run_children(int nranks, const std::vector<std::string>& extra_env, int timeout_s) {
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    env.push_back("CPGEN_NCCL_WORKER_RANK=" + std::to_string(r));
    env.push_back("CPGEN_NCCL_WORKER_NRANKS=" + std::to_string(nranks));
    env.push_back("CPGEN_NCCL_WORKER_PARENT=" + std::to_string(getpid()));
    env.push_back("NCCL_HOSTID=cpgen-test-host-" + std::to_string(r));
    for (const auto& [name, value] : testing::nccl_rank_test_env()) env.push_back(std::string(name) + "=" + value);
    for (const auto& e : extra_env) env.push_back(e);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe", filter = "--gtest_filter=NcclRingWorker.Run";
    char* argv[] = {exe.data(), filter.data(), nullptr};
    pid_t pid = 0;
    if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()) != 0) {
      ADD_FAILURE() << "posix_spawn failed for rank " << r;
      continue;
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(pids.size(), -1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  size_t done = 0;
  while (done < pids.size()) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (codes[i] != -1) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        ++done;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (codes[i] == -1) {
          kill(pids[i], SIGKILL);
          waitpid(pids[i], nullptr, 0);
          codes[i] = 128 + SIGKILL;
          ++done;
        }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return codes;
}

using testing::slurp;

// An allreduce of 1024 floats on the caller's communicator (each rank contributes rank + 1):
// whether it still works after the ring's own communicator was aborted.
std::string allreduce_on_caller_comm(void* comm, int nranks) {
  auto nccl = static_cast<ncclComm_t>(comm);
  int device = 0, rank = 0;
  if (ncclCommCuDevice(nccl, &device) != ncclSuccess || ncclCommUserRank(nccl, &rank) != ncclSuccess)
    return "allreduce: the caller's communicator is unusable";
  use_primary_context(device);
  DeviceBuffer values = DeviceBuffer::from_host(device, std::vector<float>(1024, rank + 1.0f));
  gpu::Stream s;
  const ncclResult_t status =
      ncclAllReduce(values.as<void>(), values.as<void>(), 1024, ncclFloat, ncclSum, nccl, s.get());
  if (status != ncclSuccess) return std::string("allreduce failed: ") + ncclGetErrorString(status);
  if (cu::driver().cuStreamSynchronize(s.get()) != CUDA_SUCCESS) return "allreduce failed on the GPU";
  const float want = nranks * (nranks + 1) / 2.0f;
  for (float got : values.download_as<float>())
    if (got != want) return "allreduce wrong: " + std::to_string(got) + ", expected " + std::to_string(want);
  return "allreduce ok";
}

// The child's side. Skips unless started by the tests below.
TEST(NcclRingWorker, Run) {
  const std::string rank_text = env_or("CPGEN_NCCL_WORKER_RANK");
  if (rank_text.empty()) GTEST_SKIP() << "runs only as a child process of the NcclRing tests";
  // A test killed by its time limit must not leave its ranks holding the GPU: die with it (the
  // parent may already be gone by the time this runs, hence the check after).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (std::to_string(getppid()) != env_or("CPGEN_NCCL_WORKER_PARENT")) std::_Exit(3);
  const int rank = std::stoi(rank_text);
  const int nranks = std::stoi(env_or("CPGEN_NCCL_WORKER_NRANKS"));
  const std::string mode = env_or("CPGEN_NCCL_WORKER_MODE");
  const std::string result_path = env_or("CPGEN_NCCL_WORKER_RESULT") + "." + rank_text;
  NcclFileBootstrap boot;
  boot.path = env_or("CPGEN_NCCL_WORKER_ID_FILE");
  boot.rank = rank;
  boot.nranks = nranks;
  boot.timeout_seconds = 60;
  boot.job_key = env_or("CPGEN_NCCL_WORKER_JOB");
  void* comm = nccl_comm_from_file(boot);
  std::ofstream result(result_path);

  if (mode == "check") {
    AttentionVectors vec = load_attention_vectors(env_or("CPGEN_NCCL_WORKER_VECTORS"));
    const Scheme scheme = parse_scheme(env_or("CPGEN_NCCL_WORKER_SCHEME"));
    const Dtype dtype = parse_dtype(env_or("CPGEN_NCCL_WORKER_DTYPE"));
    const Problem p = problem_from_vectors(vec, nranks, scheme, dtype);
    std::vector<float> q(vec.q.begin(), vec.q.end()), k(vec.k.begin(), vec.k.end()),
        v(vec.v.begin(), vec.v.end());
    std::vector<float> out, lse;
    RingOptions options;
    options.watchdog_seconds = 120;
    gpu::run_gpu_ring_nccl_rank(p, comm, q, k, v, options, out, lse);
    const std::vector<double> want_out =
        scatter_shard(vec.out, p.batch, p.q_heads, p.seq_len, p.head_dim, scheme, nranks, rank, p.documents);
    const std::vector<double> want_lse =
        scatter_shard(vec.lse, p.batch, p.q_heads, p.seq_len, 1, scheme, nranks, rank, p.documents);
    testing::expect_close_to(out, lse, want_out, want_lse, p.head_dim,
                             vec.name + " NCCL rank " + rank_text + "/" + std::to_string(nranks));
    result << (HasFailure() ? "failed" : "ok") << "\n";
    nccl_comm_destroy(comm);
  } else if (mode == "backward") {
    // The forward, then the backward of this rank's shard, against the vectors' gradients.
    AttentionVectors vec = load_attention_vectors(env_or("CPGEN_NCCL_WORKER_VECTORS"));
    const Scheme scheme = parse_scheme(env_or("CPGEN_NCCL_WORKER_SCHEME"));
    const Dtype dtype = parse_dtype(env_or("CPGEN_NCCL_WORKER_DTYPE"));
    const Problem p = problem_from_vectors(vec, nranks, scheme, dtype);
    std::vector<float> q(vec.q.begin(), vec.q.end()), k(vec.k.begin(), vec.k.end()),
        v(vec.v.begin(), vec.v.end()), dout(vec.dout.begin(), vec.dout.end());
    std::vector<float> out, lse;
    gpu::RankGrads grads;
    RingOptions options;
    options.watchdog_seconds = 120;
    gpu::run_gpu_ring_nccl_rank(p, comm, q, k, v, options, out, lse, &dout, &grads);
    auto shard = [&](const std::vector<double>& full, int64_t heads) {
      return scatter_shard(full, p.batch, heads, p.seq_len, p.head_dim, scheme, nranks, rank, p.documents);
    };
    testing::expect_grads_close(grads.dq, grads.dk, grads.dv, shard(vec.dq, p.q_heads), shard(vec.dk, p.kv_heads),
                                shard(vec.dv, p.kv_heads),
                                vec.name + " NCCL backward rank " + rank_text + "/" + std::to_string(nranks));
    result << (HasFailure() ? "failed" : "ok") << "\n";
    nccl_comm_destroy(comm);
  } else if (mode == "watchdog") {
    // Rank 1 creates its ring (splitting the communicator is collective) and then never runs it;
    // rank 0's watchdog must name it and abort only the ring's own communicator: afterwards an
    // allreduce on the caller's communicator, which both ranks join, still works.
    const double timeout = 3;
    Problem p;
    p.q_heads = 2;
    p.kv_heads = 2;
    p.head_dim = 64;
    p.seq_len = 256;
    p.cp_size = nranks;
    RingOptions options;
    options.watchdog_seconds = timeout;
    if (rank == 1) {
      RingAttention ring = RingAttention::nccl(p, comm, options);
      std::this_thread::sleep_for(std::chrono::duration<double>(timeout + 5));
      result << "slept\n" << allreduce_on_caller_comm(comm, nranks) << "\n";
      result.flush();
      std::_Exit(0);  // the peer aborted its side of the ring's communicator; skip ncclCommDestroy
    }
    std::vector<float> q = testing::random_bf16_exact(2 * 256 * 64, 1), k = q, v = q, out, lse;
    const auto start = std::chrono::steady_clock::now();
    try {
      gpu::run_gpu_ring_nccl_rank(p, comm, q, k, v, options, out, lse);
      result << "no error\n";
    } catch (const Error& e) {
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      result << "error after " << took << " s: " << e.what() << "\n";
    }
    result << allreduce_on_caller_comm(comm, nranks) << "\n";
    result.flush();
    std::_Exit(0);
  } else if (mode == "graph") {
    // Two forwards (two output buffers) captured into one graph after an uncaptured warm-up call,
    // replayed twice, each against the vectors.
    AttentionVectors vec = load_attention_vectors(env_or("CPGEN_NCCL_WORKER_VECTORS"));
    const Problem p = problem_from_vectors(vec, nranks, Scheme::kZigzag, Dtype::kBf16);
    std::vector<float> q(vec.q.begin(), vec.q.end()), k(vec.k.begin(), vec.k.end()),
        v(vec.v.begin(), vec.v.end());
    RingOptions options;
    options.watchdog_seconds = 120;
    RingAttention ring = RingAttention::nccl(p, comm, options);
    gpu::DeviceShard a = gpu::upload_shard(p, rank, ring.device(), q, k, v);
    gpu::DeviceShard b = gpu::upload_shard(p, rank, ring.device(), q, k, v);
    const ShardPointers pa = a.pointers(), pb = b.pointers();
    const cu::DriverApi& api = cu::driver();
    gpu::Stream s;
    ring.forward(pa.q, pa.k, pa.v, pa.out, pa.lse, s.get());
    ring.synchronize();
    CPGEN_CU_CHECK(api.cuStreamBeginCapture(s.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    ring.forward(pa.q, pa.k, pa.v, pa.out, pa.lse, s.get());
    ring.forward(pb.q, pb.k, pb.v, pb.out, pb.lse, s.get());
    CUgraph graph = nullptr;
    CPGEN_CU_CHECK(api.cuStreamEndCapture(s.get(), &graph));
    CUgraphExec exec = nullptr;
    CPGEN_CU_CHECK(api.cuGraphInstantiateWithFlags(&exec, graph, 0));
    const std::vector<double> want_out =
        scatter_shard(vec.out, p.batch, p.q_heads, p.seq_len, p.head_dim, p.scheme, nranks, rank, p.documents);
    const std::vector<double> want_lse = scatter_shard(vec.lse, p.batch, p.q_heads, p.seq_len, 1, p.scheme, nranks, rank, p.documents);
    for (int replay = 0; replay < 2; ++replay) {
      gpu::poison_outputs(p, a);
      gpu::poison_outputs(p, b);
      CPGEN_CU_CHECK(api.cuGraphLaunch(exec, s.get()));
      CPGEN_CU_CHECK(api.cuStreamSynchronize(s.get()));
      for (const gpu::DeviceShard* shard : {&a, &b}) {
        std::vector<float> out, lse;
        gpu::download_outputs(p, *shard, out, lse);
        testing::expect_close_to(out, lse, want_out, want_lse, p.head_dim,
                                 vec.name + " graph replay " + std::to_string(replay) + " rank " + rank_text);
      }
    }
    api.cuGraphExecDestroy(exec);
    api.cuGraphDestroy(graph);
    result << (HasFailure() ? "failed" : "ok") << "\n";
    } else {
    FAIL() << "unknown CPGEN_NCCL_WORKER_MODE '" << mode << "'";
  }
}

// One vectors file through a ring of `nranks` worker processes in `mode` (check: the forward;
// backward: the gradients too), `job` numbering its bootstrap and result files in `dir`: every
// rank exits 0 and writes "ok".
void expect_vectors_job(const testing::TempDir& dir, const std::string& mode, int job, int nranks,
                        const std::string& file, const char* scheme, const char* dtype) {
  const std::string tag = file + " " + mode + " N=" + std::to_string(nranks) + " " + scheme + " " + dtype;
  const std::string result = dir.path() + "/result" + std::to_string(job);
  std::vector<int> codes = run_children(
      nranks,
      {"CPGEN_NCCL_WORKER_MODE=" + mode, "CPGEN_NCCL_WORKER_RESULT=" + result,
       "CPGEN_NCCL_WORKER_ID_FILE=" + dir.path() + "/id" + std::to_string(job),
       "CPGEN_NCCL_WORKER_JOB=" + mode + std::to_string(job),
       "CPGEN_NCCL_WORKER_VECTORS=" + testing::vectors_dir() + "/" + file,
       std::string("CPGEN_NCCL_WORKER_SCHEME=") + scheme, std::string("CPGEN_NCCL_WORKER_DTYPE=") + dtype},
      kChildSeconds);
  for (int r = 0; r < nranks; ++r) {
    EXPECT_EQ(codes[r], 0) << tag << ": rank " << r << " exited with " << codes[r];
    EXPECT_EQ(slurp(result + "." + std::to_string(r)), "ok\n") << tag << ": rank " << r;
  }
}

// The vectors through rings of `nranks` processes: each file, zigzag and striped, in `dtypes`.
void processes_match_vectors(int nranks, std::initializer_list<const char*> dtypes) {
  CPGEN_REQUIRE_GPU();
  testing::TempDir dir("nccl_ring");
  int job = 0;
  for (const char* file : {"gqa4_causal_hd64_s32.json", "gqa2_causal_hd128_s32.json", "mha_full_hd64_s32_b2.json"})
    for (const char* scheme : {"zigzag", "striped"})
      for (const char* dtype : dtypes) expect_vectors_job(dir, "check", job++, nranks, file, scheme, dtype);
}

// Two tests, not one: their 12 and 6 socket jobs each fit the per-test limit (CPGEN_TEST_TIMEOUT,
// 180 s under gpu-check) that the 18 together might not.
TEST(NcclRing, TwoProcessesOnOneGpuMatchVectors) { processes_match_vectors(2, {"bf16", "fp16"}); }
TEST(NcclRing, FourProcessesOnOneGpuMatchVectors) { processes_match_vectors(4, {"bf16"}); }

TEST(NcclRing, TwoProcessesBackwardMatchesVectorGradients) {
  CPGEN_REQUIRE_GPU();
  testing::TempDir dir("nccl_ring_backward");
  int job = 0;
  for (const char* file : {"gqa4_causal_hd64_s32.json", "mha_full_hd64_s32_b2.json"})
    for (const char* scheme : {"zigzag", "contiguous"})
      for (const char* dtype : {"bf16", "fp16"}) expect_vectors_job(dir, "backward", job++, 2, file, scheme, dtype);
}

TEST(NcclRing, WatchdogNamesTheRankThatNeverSends) {
  CPGEN_REQUIRE_GPU();
  testing::TempDir dir("nccl_watchdog");
  const std::string result = dir.path() + "/result";
  std::vector<int> codes = run_children(
      2,
      {"CPGEN_NCCL_WORKER_MODE=watchdog", "CPGEN_NCCL_WORKER_RESULT=" + result,
       "CPGEN_NCCL_WORKER_ID_FILE=" + dir.path() + "/id", "CPGEN_NCCL_WORKER_JOB=watchdog"},
      120);
  EXPECT_EQ(codes[0], 0);
  const std::string report = slurp(result + ".0");
  ASSERT_EQ(report.rfind("error after ", 0), 0u) << "rank 0 did not fail: " << report;
  const double took = std::stod(report.substr(std::string("error after ").size()));
  // The watchdog's timeout is 3 s; allow for connection setup and polling, never a hang.
  EXPECT_LT(took, 3 + 15) << report;
  EXPECT_GE(took, 2.5) << "failed before the timeout: " << report;
  EXPECT_NE(report.find("stalled on rank 0"), std::string::npos) << report;
  EXPECT_NE(report.find("receiving from rank 1"), std::string::npos) << report;
  EXPECT_NE(report.find("ring step 0"), std::string::npos) << report;
  // The watchdog aborted the ring's own communicator, not the caller's.
  EXPECT_NE(report.find("allreduce ok"), std::string::npos) << report;
  EXPECT_EQ(codes[1], 0);
  const std::string peer = slurp(result + ".1");
  EXPECT_NE(peer.find("allreduce ok"), std::string::npos) << "rank 1: " << peer;
}

// Two forwards captured into a CUDA graph on each of 2 ranks, replayed against the vectors.
TEST(NcclRing, ForwardsCapturedIntoAGraphReplay) {
  CPGEN_REQUIRE_GPU();
  testing::TempDir dir("nccl_graph");
  const std::string result = dir.path() + "/result";
  std::vector<int> codes = run_children(
      2,
      {"CPGEN_NCCL_WORKER_MODE=graph", "CPGEN_NCCL_WORKER_RESULT=" + result,
       "CPGEN_NCCL_WORKER_ID_FILE=" + dir.path() + "/id", "CPGEN_NCCL_WORKER_JOB=graph",
       "CPGEN_NCCL_WORKER_VECTORS=" + testing::vectors_dir() + "/gqa2_causal_hd128_s32.json"},
      kChildSeconds);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(codes[r], 0) << "rank " << r;
    EXPECT_EQ(slurp(result + "." + std::to_string(r)), "ok\n") << "rank " << r;
  }
}

}  // namespace
}  // namespace cpgen

#endif  // CPGEN_HAVE_NCCL
