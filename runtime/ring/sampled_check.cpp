#include "runtime/ring/sampled_check.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include "cpgen/error.h"
#include "runtime/core/attention_shape.h"
#include "runtime/ring/partition.h"

namespace cpgen {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Runs task(0 .. count-1) on every hardware thread; tasks write disjoint outputs. The first
// exception is rethrown after every thread has stopped.
template <typename Task>
void parallel_for(int64_t count, const Task& task) {
  const int64_t threads = std::min<int64_t>(count, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<int64_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto work = [&] {
    try {
      for (int64_t i = next++; i < count; i = next++) task(i);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = count;
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

// A multiple of 1/32 in [-limit, limit]: at most 8 significant bits, exact in bf16 and fp16.
std::vector<double> draw(uint64_t seed, uint64_t tensor_id, int64_t count, int limit) {
  return grid_draw(seed, tensor_id, count, 32 * limit, 32);
}

// Four running sums: the compiler may not reorder one double sum, and four independent ones
// cut the CPU time of a 16K-token, 32-head sampled check from about 12 s to 8 s here.
double dot(const double* a, const double* b, int64_t n) {
  double sum[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) sum[k] += a[i + k] * b[i + k];
  for (; i < n; ++i) sum[0] += a[i] * b[i];
  return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

// Where a sampled tensor's rows live, and how many rows (heads) it has.
const std::vector<double>& expected_of(const SampledReference& ref, const std::string& tensor, int64_t* rows,
                                       int64_t* width) {
  *width = tensor == "lse" ? 1 : ref.head_dim;
  *rows = tensor == "dk" || tensor == "dv" ? ref.kv_rows : ref.q_rows;
  const std::vector<double>* want = tensor == "out" ? &ref.out
                                    : tensor == "lse" ? &ref.lse
                                    : tensor == "dq"  ? &ref.dq
                                    : tensor == "dk"  ? &ref.dk
                                    : tensor == "dv"  ? &ref.dv
                                                      : nullptr;
  if (!want || want->empty())
    throw Error(ErrorKind::kInternal, "sampled check: no reference for tensor '" + tensor + "'");
  return *want;
}

// Calls visit(got, want) for every sampled element of a gathered tensor.
template <typename Visit>
void for_each_sample(const SampledReference& ref, const std::string& tensor, const std::vector<float>& got,
                     Visit visit) {
  int64_t rows = 0, width = 0;
  const std::vector<double>& want = expected_of(ref, tensor, &rows, &width);
  if (static_cast<int64_t>(got.size()) != rows * ref.seq_len * width)
    throw Error(ErrorKind::kInternal, "sampled check: " + tensor + " has " + std::to_string(got.size()) +
                                          " elements; expected " + std::to_string(rows * ref.seq_len * width));
  const int64_t samples = static_cast<int64_t>(ref.positions.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t s = 0; s < samples; ++s)
      for (int64_t d = 0; d < width; ++d)
        visit(static_cast<double>(got[static_cast<size_t>((r * ref.seq_len + ref.positions[s]) * width + d)]),
              want[static_cast<size_t>((r * samples + s) * width + d)]);
}

}  // namespace

std::vector<double> grid_draw(uint64_t seed, uint64_t tensor_id, int64_t count, int half_steps, int denominator) {
  const GridDraw draw(seed, tensor_id, half_steps);
  std::vector<double> values(static_cast<size_t>(count));
  constexpr int64_t kBlock = 1 << 20;
  parallel_for((count + kBlock - 1) / kBlock, [&](int64_t block) {
    for (int64_t i = block * kBlock; i < std::min(count, (block + 1) * kBlock); ++i)
      values[static_cast<size_t>(i)] = static_cast<double>(draw.step(i)) / denominator;
  });
  return values;
}

AttentionVectors random_vectors(const Problem& problem, uint64_t seed) {
  AttentionVectors v;
  v.name = problem.name;
  // The whole shape, mask included (window, softcap, documents): field by field it left the mask
  // out, and verify --shape checked every masked shape as the unmasked one.
  v.shape = attention_shape_of(problem);
  v.seq_len = problem.seq_len;
  v.format = 2;  // the mask model's every field (format 1 has only a left window): verify --output writes them
  const int64_t q_size = problem.batch * problem.q_heads * problem.seq_len * problem.head_dim;
  const int64_t kv_size = problem.batch * problem.kv_heads * problem.seq_len * problem.head_dim;
  // q and k in [-2, 2]: with the default scale a score has a standard deviation of about 4/3,
  // so each softmax row has a few dominant keys but is far from one-hot (a wider range makes it
  // one-hot and hides errors in the merge; a narrower one makes it flat and hides the mask).
  v.q = draw(seed, 1, q_size, 2);
  v.k = draw(seed, 2, kv_size, 2);
  v.v = draw(seed, 3, kv_size, 4);
  v.dout = draw(seed, 4, q_size, 4);
  return v;
}

std::vector<int64_t> sample_positions(Scheme scheme, int64_t seq_len, int cp_size, int64_t max_rows,
                                      const std::vector<int64_t>& documents) {
  std::vector<int64_t> positions;
  if (seq_len <= max_rows) {
    for (int64_t i = 0; i < seq_len; ++i) positions.push_back(i);
    return positions;
  }
  // The shards the ring runs: with documents, each document is split on its own.
  for (const std::vector<int64_t>& shard : partition_positions_all(scheme, seq_len, cp_size, documents)) {
    if (shard.empty()) continue;  // a rank that holds no token
    positions.push_back(shard.front());
    positions.push_back(shard.back());
  }
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  // Fill up to max_rows with evenly spread positions (0 and seq_len - 1 among them); some of
  // them may coincide with shard ends, so spread a few more until the count is reached.
  const std::vector<int64_t> ends = positions;
  for (int64_t spread = std::max<int64_t>(2, max_rows - static_cast<int64_t>(ends.size()));; ++spread) {
    positions = ends;
    for (int64_t i = 0; i < spread; ++i) positions.push_back(i * (seq_len - 1) / (spread - 1));
    std::sort(positions.begin(), positions.end());
    positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
    if (static_cast<int64_t>(positions.size()) >= max_rows || spread >= seq_len) return positions;
  }
}

SampledReference sampled_reference(const AttentionVectors& in, std::vector<int64_t> positions, bool with_grads) {
  const AttentionShape& s = in.shape;
  check_attention_shape(s);
  const int64_t n = in.seq_len, d = s.head_dim, samples = static_cast<int64_t>(positions.size());
  SampledReference ref;
  ref.positions = std::move(positions);
  ref.q_rows = s.batch * s.q_heads;
  ref.kv_rows = s.batch * s.kv_heads;
  ref.head_dim = d;
  ref.seq_len = n;
  ref.out.assign(static_cast<size_t>(ref.q_rows * samples * d), 0.0);
  ref.lse.assign(static_cast<size_t>(ref.q_rows * samples), 0.0);
  if (with_grads) {
    ref.dq.assign(ref.out.size(), 0.0);
    ref.dk.assign(static_cast<size_t>(ref.kv_rows * samples * d), 0.0);
    ref.dv.assign(ref.dk.size(), 0.0);
  }
  // Exact softmax of query position i against every visible key into out; returns lse (-inf:
  // no visible key). scores is the caller's scratch row.
  const auto attend = [&](std::vector<double>& scores, const double* q_row, const double* k_head,
                          const double* v_head, int64_t i, double* out) {
    double max_score = kNegInf;
    for (int64_t j = 0; j < n; ++j) {
      scores[j] = key_visible(s, i, j) ? attention_logit(s, dot(q_row, k_head + j * d, d)) : kNegInf;
      max_score = std::max(max_score, scores[j]);
    }
    std::fill(out, out + d, 0.0);
    if (max_score == kNegInf) return kNegInf;
    double denominator = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (scores[j] == kNegInf) continue;
      const double p = std::exp(scores[j] - max_score);
      denominator += p;
      for (int64_t c = 0; c < d; ++c) out[c] += p * v_head[j * d + c];
    }
    for (int64_t c = 0; c < d; ++c) out[c] /= denominator;
    return max_score + std::log(denominator);
  };

  // Query side, one (batch, q head) per task: out, lse and dq at the sampled positions.
  parallel_for(ref.q_rows, [&](int64_t row) {
    std::vector<double> scores(static_cast<size_t>(n));
    const int64_t kv_row = row / s.q_heads * s.kv_heads + row % s.q_heads / s.group();
    const double* q_head = in.q.data() + row * n * d;
    const double* do_head = with_grads ? in.dout.data() + row * n * d : nullptr;
    const double* k_head = in.k.data() + kv_row * n * d;
    const double* v_head = in.v.data() + kv_row * n * d;
    for (int64_t t = 0; t < samples; ++t) {
      const int64_t i = ref.positions[t];
      double* out = ref.out.data() + (row * samples + t) * d;
      const double lse = attend(scores, q_head + i * d, k_head, v_head, i, out);
      ref.lse[row * samples + t] = lse;
      if (!with_grads || lse == kNegInf) continue;
      // dS_ij = P_ij (dO_i . V_j - D_i) with D_i = dO_i . O_i; dQ_i = scale sum_j dS_ij K_j.
      const double delta = dot(do_head + i * d, out, d);
      double* dq = ref.dq.data() + (row * samples + t) * d;
      for (int64_t j = 0; j < n; ++j) {
        if (scores[j] == kNegInf) continue;
        const double p = std::exp(scores[j] - lse);
        const double ds = p * (dot(do_head + i * d, v_head + j * d, d) - delta) * logit_slope(s, scores[j]);
        for (int64_t c = 0; c < d; ++c) dq[c] += s.scale * ds * k_head[j * d + c];
      }
    }
  });
  if (!with_grads) return ref;

  // Key side, one (batch, kv head) per task, so that the query heads of its group add into dk
  // and dv in one thread. dK_j and dV_j sum over every query row that sees key j, so each head's
  // lse and D are needed at every position: the one full pass over the sequence.
  parallel_for(ref.kv_rows, [&](int64_t kv_row) {
    std::vector<double> scores(static_cast<size_t>(n)), out_row(static_cast<size_t>(d));
    std::vector<double> row_lse(static_cast<size_t>(n)), row_delta(static_cast<size_t>(n));
    const double* k_head = in.k.data() + kv_row * n * d;
    const double* v_head = in.v.data() + kv_row * n * d;
    const int64_t b = kv_row / s.kv_heads, kvh = kv_row % s.kv_heads;
    for (int64_t h = kvh * s.group(); h < (kvh + 1) * s.group(); ++h) {
      const int64_t row = b * s.q_heads + h;
      const double* q_head = in.q.data() + row * n * d;
      const double* do_head = in.dout.data() + row * n * d;
      for (int64_t i = 0; i < n; ++i) {
        row_lse[i] = attend(scores, q_head + i * d, k_head, v_head, i, out_row.data());
        row_delta[i] = dot(do_head + i * d, out_row.data(), d);
      }
      for (int64_t t = 0; t < samples; ++t) {
        const int64_t j = ref.positions[t];
        double* dk = ref.dk.data() + (kv_row * samples + t) * d;
        double* dv = ref.dv.data() + (kv_row * samples + t) * d;
        for (int64_t i = 0; i < n; ++i) {
          if (row_lse[i] == kNegInf || !key_visible(s, i, j)) continue;
          const double logit = attention_logit(s, dot(q_head + i * d, k_head + j * d, d));
          const double p = std::exp(logit - row_lse[i]);
          const double ds = p * (dot(do_head + i * d, v_head + j * d, d) - row_delta[i]) * logit_slope(s, logit);
          for (int64_t c = 0; c < d; ++c) {
            dk[c] += s.scale * ds * q_head[i * d + c];  // dK_j = scale sum_i dS_ij Q_i
            dv[c] += p * do_head[i * d + c];             // dV_j = sum_i P_ij dO_i
          }
        }
      }
    }
  });
  return ref;
}

double sampled_relative_error(const SampledReference& ref, const std::string& tensor, const std::vector<float>& got) {
  double diff = 0, norm = 0;
  for_each_sample(ref, tensor, got, [&](double g, double w) {
    // Rows with no visible key have lse -inf on both sides; they agree and add nothing.
    if (std::isinf(w) && g == w) return;
    diff += (g - w) * (g - w);
    norm += w * w;
  });
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

double sampled_max_abs_error(const SampledReference& ref, const std::string& tensor, const std::vector<float>& got) {
  double worst = 0;
  for_each_sample(ref, tensor, got, [&](double g, double w) {
    const double err = std::isinf(w) && g == w ? 0 : std::abs(g - w);
    worst = std::isnan(worst) || std::isnan(err) ? NAN : std::max(worst, err);  // NaN sticks
  });
  return worst;
}

}  // namespace cpgen
