#include "ring_step_harness.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>

#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/core/half_convert.h"
#include "runtime/jit/jit.h"
#include "runtime/cuda/module.h"
#include "test_util.h"

namespace cpgen::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kPad = kRowPad;

size_t index4(int b, int h, int s, int d, int heads, int seq, int dim) {
  return ((static_cast<size_t>(b) * heads + h) * seq + s) * dim + d;
}

// One compiled and loaded kernel per URI for the whole test binary.
const LoadedKernel& kernel_for(const KernelSpec& spec) {
  static std::mutex mutex;
  static std::map<std::string, const LoadedKernel*> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = loaded.find(spec.uri());
  if (it != loaded.end()) return *it->second;
  CompiledKernel compiled = compile_kernel(spec, device_arch(0), nullptr);
  const LoadedKernel& k = load_kernel(compiled, 0);
  loaded[spec.uri()] = &k;
  return k;
}

}  // namespace

std::vector<uint16_t> gather_rows(const std::vector<double>& full, int batch, int heads, int seq,
                                  int dim, const std::vector<int>& positions, Dtype dtype) {
  const int rows = static_cast<int>(positions.size()), pitch = dim + kPad;
  std::vector<uint16_t> out(static_cast<size_t>(batch) * heads * rows * pitch, kPoison16);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int r = 0; r < rows; ++r)
        for (int d = 0; d < dim; ++d)
          out[index4(b, h, r, d, heads, rows, pitch)] = to_bits(full[index4(b, h, positions[r], d, heads, seq, dim)], dtype);
  return out;
}

uint16_t to_bits(double value, Dtype dtype) {
  const float f = static_cast<float>(value);
  return dtype == Dtype::kFp16 ? float_to_fp16(f) : float_to_bf16(f);
}

double from_bits(uint16_t bits, Dtype dtype) {
  return dtype == Dtype::kFp16 ? fp16_to_float(bits) : bf16_to_float(bits);
}

AttentionProblem random_problem(int batch, int q_heads, int kv_heads, int head_dim, int seq_len,
                                bool causal, uint32_t seed) {
  AttentionProblem p;
  p.batch = batch;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.seq_len = seq_len;
  p.causal = causal;
  p.softmax_scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto fill = [&](std::vector<double>& t, int heads) {
    t.resize(static_cast<size_t>(batch) * heads * seq_len * head_dim);
    for (double& x : t) x = std::clamp(std::round(normal(rng) * 32.0), -128.0, 128.0) / 32.0;
  };
  fill(p.q, q_heads);
  fill(p.k, kv_heads);
  fill(p.v, kv_heads);
  return p;
}

void make_scores_climb(AttentionProblem& p, int keys_per_unit) {
  if (keys_per_unit < 1 || (p.seq_len - 1) / keys_per_unit > 255)
    throw std::runtime_error("make_scores_climb: k's first column would leave the exact integers");
  const size_t dim = static_cast<size_t>(p.head_dim), seq = static_cast<size_t>(p.seq_len);
  for (size_t row = 0; row < p.q.size() / dim; ++row) p.q[row * dim] = 4.0;
  for (size_t row = 0; row < p.k.size() / dim; ++row) p.k[row * dim] = static_cast<double>((row % seq) / keys_per_unit);
}

AttentionProblem load_vector_case(const std::string& path, AttentionOutput* expected) {
  nlohmann::json j = load_json(path);
  if (j.at("format") != "cpgen-attention-vectors/1") throw std::runtime_error("unknown format in " + path);
  if (!j.at("window").is_null()) throw std::runtime_error(path + " uses a window; the step kernel has none");
  AttentionProblem p;
  p.batch = j.at("batch");
  p.q_heads = j.at("q_heads");
  p.kv_heads = j.at("kv_heads");
  p.head_dim = j.at("head_dim");
  p.seq_len = j.at("seq_len");
  p.causal = j.at("causal");
  p.softmax_scale = j.at("softmax_scale");
  p.q = j.at("q").get<std::vector<double>>();
  p.k = j.at("k").get<std::vector<double>>();
  p.v = j.at("v").get<std::vector<double>>();
  if (expected) {
    expected->out = j.at("out").get<std::vector<double>>();
    expected->lse = j.at("lse").get<std::vector<double>>();
  }
  return p;
}

AttentionOutput reference_attention(const AttentionProblem& p) {
  AttentionOutput r;
  const int S = p.seq_len, D = p.head_dim, group = p.q_heads / p.kv_heads;
  r.out.assign(static_cast<size_t>(p.batch) * p.q_heads * S * D, 0.0);
  r.lse.assign(static_cast<size_t>(p.batch) * p.q_heads * S, -std::numeric_limits<double>::infinity());
  std::vector<double> scores(S);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.q_heads; ++h) {
      const int kvh = h / group;
      for (int i = 0; i < S; ++i) {
        const int keys = p.causal ? i + 1 : S;
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < keys; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += p.q[index4(b, h, i, d, p.q_heads, S, D)] * p.k[index4(b, kvh, j, d, p.kv_heads, S, D)];
          scores[j] = dot * p.softmax_scale;
          mx = std::max(mx, scores[j]);
        }
        double den = 0;
        for (int j = 0; j < keys; ++j) den += std::exp(scores[j] - mx);
        for (int j = 0; j < keys; ++j) {
          const double w = std::exp(scores[j] - mx) / den;
          for (int d = 0; d < D; ++d)
            r.out[index4(b, h, i, d, p.q_heads, S, D)] += w * p.v[index4(b, kvh, j, d, p.kv_heads, S, D)];
        }
        r.lse[(static_cast<size_t>(b) * p.q_heads + h) * S + i] = mx + std::log(den);
      }
    }
  return r;
}

std::vector<std::vector<int>> zigzag_split(int seq_len, int cp_size) {
  const int chunk = seq_len / (2 * cp_size);
  std::vector<std::vector<int>> ranks(cp_size);
  for (int r = 0; r < cp_size; ++r)
    for (int c : {r, 2 * cp_size - 1 - r})
      for (int i = 0; i < chunk; ++i) ranks[r].push_back(c * chunk + i);
  return ranks;
}

RingRun run_ring_on_gpu(const AttentionProblem& p, const KernelSpec& spec,
                        const std::vector<std::vector<int>>& ranks) {
  RingRun run;
  const int B = p.batch, HQ = p.q_heads, HK = p.kv_heads, D = p.head_dim, S = p.seq_len;
  const int pitch = D + kPad, n = static_cast<int>(ranks.size());
  const LoadedKernel& kernel = kernel_for(spec);
  const int shared = check_feasibility(spec, device_arch(0)).shared_bytes;
  kernel.reserve_dynamic_shared(shared);

  // Every rank's K and V chunk, uploaded once.
  std::vector<DeviceBuffer> k_chunks, v_chunks, kv_pos;
  for (const auto& positions : ranks) {
    k_chunks.push_back(DeviceBuffer::from_host(0, gather_rows(p.k, B, HK, S, D, positions, spec.dtype)));
    v_chunks.push_back(DeviceBuffer::from_host(0, gather_rows(p.v, B, HK, S, D, positions, spec.dtype)));
    kv_pos.push_back(DeviceBuffer::from_host(0, positions));
  }
  for (int r = 0; r < n; ++r) {
    const std::vector<int>& q_positions = ranks[r];
    const int q_len = static_cast<int>(q_positions.size());
    DeviceBuffer q = DeviceBuffer::from_host(0, gather_rows(p.q, B, HQ, S, D, q_positions, spec.dtype));
    DeviceBuffer q_pos = DeviceBuffer::from_host(0, q_positions);
    DeviceBuffer out(0, static_cast<size_t>(B) * HQ * q_len * pitch * 2);
    DeviceBuffer lse(0, static_cast<size_t>(B) * HQ * q_len * 4);
    DeviceBuffer o_state(0, static_cast<size_t>(B) * HQ * q_len * D * 4);
    DeviceBuffer m_state(0, static_cast<size_t>(B) * HQ * q_len * 4);
    DeviceBuffer l_state(0, static_cast<size_t>(B) * HQ * q_len * 4);
    // NaN everywhere: the first step must ignore the state, the last must write every output.
    for (DeviceBuffer* b : {&out, &lse, &o_state, &m_state, &l_state}) b->poison();

    for (int step = 0; step < n; ++step) {
      const int src = ((r - step) % n + n) % n;
      RingFwdParams prm = step_params(p, ranks, r, step);
      prm.q = q.as<void>();
      prm.k = k_chunks[src].as<void>();
      prm.v = v_chunks[src].as<void>();
      prm.out = out.as<void>();
      prm.lse = lse.as<float>();
      prm.o_state = o_state.as<float>();
      prm.m_state = m_state.as<float>();
      prm.l_state = l_state.as<float>();
      prm.q_positions = q_pos.as<int>();
      prm.kv_positions = kv_pos[src].as<int>();
      LaunchShape shape;
      shape.grid[0] = static_cast<unsigned>((q_len * spec.gqa_group + spec.block_m - 1) / spec.block_m);
      shape.grid[1] = static_cast<unsigned>(B * HK);
      shape.block[0] = static_cast<unsigned>(spec.threads());
      shape.dynamic_shared_bytes = shared;
      kernel.launch(prm, shape);
      ++run.launches;
    }
    use_primary_context(0);
    CPGEN_CU_CHECK(cu::driver().cuCtxSynchronize());
    collect_rank(p, spec.dtype, r, q_positions, out.download_as<uint16_t>(), lse.download_as<float>(), &run);
  }
  return run;
}

RingFwdParams step_params(const AttentionProblem& p, const std::vector<std::vector<int>>& ranks,
                          int rank, int step) {
  const int n = static_cast<int>(ranks.size()), pitch = p.head_dim + kPad;
  const int src = ((rank - step) % n + n) % n;
  const int q_len = static_cast<int>(ranks[rank].size()), kv_len = static_cast<int>(ranks[src].size());
  RingFwdParams prm;
  std::memset(&prm, 0, sizeof prm);
  prm.q_row_stride = prm.out_row_stride = prm.k_row_stride = prm.v_row_stride = pitch;
  prm.q_head_stride = prm.out_head_stride = static_cast<int64_t>(q_len) * pitch;
  prm.q_batch_stride = prm.out_batch_stride = prm.q_head_stride * p.q_heads;
  prm.k_head_stride = prm.v_head_stride = static_cast<int64_t>(kv_len) * pitch;
  prm.k_batch_stride = prm.v_batch_stride = prm.k_head_stride * p.kv_heads;
  prm.batch = p.batch;
  prm.q_heads = p.q_heads;
  prm.kv_heads = p.kv_heads;
  prm.q_len = q_len;
  prm.kv_len = kv_len;
  prm.scale_log2 = static_cast<float>(p.softmax_scale * 1.4426950408889634);
  prm.is_first_step = step == 0;
  prm.is_last_step = step == n - 1;
  return prm;
}

void collect_rank(const AttentionProblem& p, Dtype dtype, int r, const std::vector<int>& q_positions,
                  const std::vector<uint16_t>& out_host, const std::vector<float>& lse_host, RingRun* run) {
  const int B = p.batch, HQ = p.q_heads, D = p.head_dim, S = p.seq_len, pitch = D + kPad;
  const int q_len = static_cast<int>(q_positions.size());
  if (run->result.out.empty()) {
    run->result.out.assign(static_cast<size_t>(B) * HQ * S * D, kNaN);
    run->result.lse.assign(static_cast<size_t>(B) * HQ * S, kNaN);
  }
  std::ostringstream failure;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < HQ; ++h)
      for (int i = 0; i < q_len; ++i) {
        const int pos = q_positions[i];
        for (int d = 0; d < pitch; ++d) {
          const uint16_t bits = out_host[index4(b, h, i, d, HQ, q_len, pitch)];
          if (d >= D) {
            if (bits != kPoison16 && failure.tellp() == 0)
              failure << "rank " << r << " wrote padding at b" << b << " h" << h << " row " << i << " col " << d;
            continue;
          }
          const double value = from_bits(bits, dtype);
          if (!std::isfinite(value) && failure.tellp() == 0)
            failure << "rank " << r << " left out[b" << b << " h" << h << " pos " << pos << " d" << d
                    << "] = " << value << " (not written or not finite)";
          run->result.out[index4(b, h, pos, d, HQ, S, D)] = value;
        }
        const float l = lse_host[(static_cast<size_t>(b) * HQ + h) * q_len + i];
        if (!std::isfinite(l) && failure.tellp() == 0)
          failure << "rank " << r << " left lse[b" << b << " h" << h << " pos " << pos << "] = " << l;
        run->result.lse[(static_cast<size_t>(b) * HQ + h) * S + pos] = l;
      }
  if (run->failure.empty()) run->failure = failure.str();
}


Comparison compare(const AttentionOutput& expected, const AttentionOutput& actual, int head_dim) {
  Comparison c;
  double err2 = 0, ref2 = 0, worst = -1;
  for (size_t i = 0; i < expected.out.size(); ++i) {
    const double e = expected.out[i], a = actual.out[i];
    const double diff = std::isnan(a) ? std::numeric_limits<double>::infinity() : std::abs(a - e);
    err2 += diff * diff;
    ref2 += e * e;
    if (diff > worst) {
      worst = diff;
      std::ostringstream w;
      w << "out[row " << i / head_dim << ", d " << i % head_dim << "]: expected " << e << ", got " << a;
      c.worst = w.str();
    }
  }
  c.out_rel_frobenius = std::sqrt(err2 / std::max(ref2, 1e-300));
  for (size_t i = 0; i < expected.lse.size(); ++i) {
    const double d = std::isnan(actual.lse[i]) ? std::numeric_limits<double>::infinity()
                                                 : std::abs(actual.lse[i] - expected.lse[i]);
    c.lse_max_abs = std::max(c.lse_max_abs, d);
  }
  return c;
}

}  // namespace cpgen::testing
