// cpgen verify: run a problem through the whole ring (split, forward, backward, gather) on a
// backend and report the error of every output: a reference vectors file (--vectors), or a
// shapes entry on random inputs (--shape '{...}' --random) checked against the float64
// reference on sampled rows. Exit 0 when every error is within the backend's tolerance, 1 above
// it, 2 for bad input.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cpgen/error.h"
#include "runtime/backend/emulated_kernel.h"
#include "runtime/core/text_file.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/sampled_check.h"
#include "runtime/ring/shapes.h"
#include "runtime/ring/vectors.h"
#include "runtime/core/problem_limits.h"
#include "tools/cli/command.h"
#include "tools/cli/int_range.h"
#include "tools/cli/store_dir.h"
#include "tools/cli/verify_backend.h"

namespace cpgen::cli {
namespace {

struct VerifyOptions {
  std::string vectors_path;
  std::string shape;  // one shapes entry, with --random
  bool random = false;
  uint64_t seed = kDefaultRandomSeed;
  int64_t sample_rows = kDefaultSampleRows;
  bool draw_options_given = false;  // --seed or --sample-rows, which only --random reads
  std::string scheme;
  int ranks = 0;  // 0: not given
  std::string backend = "cpu";
  std::string dtype;
  std::string transport;
  std::vector<std::string> specs;
  std::string approx;  // --backend emulated: which value of their bound the .approx instructions return
  std::string output_path;
  bool json = false;
};

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

void write_results(const std::string& path, const AttentionVectors& vec, const VerifyOptions& opt,
                   Scheme scheme, int ranks, const SampledReference* sampled, const VerifyResults& results) {
  // The vectors file's field names and flat layout, so the same readers take either file.
  nlohmann::ordered_json doc;
  doc["format"] = "cpgen-attention-results/1";
  doc["name"] = vec.name;
  doc["batch"] = vec.shape.batch;
  doc["q_heads"] = vec.shape.q_heads;
  doc["kv_heads"] = vec.shape.kv_heads;
  doc["head_dim"] = vec.shape.head_dim;
  doc["seq_len"] = vec.seq_len;
  doc["causal"] = vec.shape.causal;
  if (vec.format == 2) {  // the format-2 mask fields, as the vectors file has them
    const auto side = [](int64_t w) { return w >= 0 ? nlohmann::ordered_json(w) : nlohmann::ordered_json(nullptr); };
    nlohmann::ordered_json documents = nlohmann::ordered_json::array();
    for (size_t i = 1; i < vec.shape.cu_seqlens.size(); ++i)
      documents.push_back(vec.shape.cu_seqlens[i] - vec.shape.cu_seqlens[i - 1]);
    doc["documents"] = documents;
    doc["window"] = {{"left", side(vec.shape.window_left)}, {"right", side(vec.shape.window_right)}};
    doc["softcap"] = vec.shape.softcap > 0 ? nlohmann::ordered_json(vec.shape.softcap) : nullptr;
  } else {
    doc["window"] = vec.shape.window_left >= 0 ? nlohmann::ordered_json(vec.shape.window_left + 1) : nullptr;
  }
  doc["softmax_scale"] = vec.shape.scale;
  doc["tensor_layout"] =
      "[batch][heads][seq][head_dim], row-major, sequence in global position order";
  doc["backend"] = opt.backend;
  doc["scheme"] = std::string(scheme_name(scheme));
  doc["cp_size"] = ranks;
  if (sampled) {
    doc["seed"] = opt.seed;
    doc["sampled_positions"] = sampled->positions;
  }
  const std::pair<const char*, const std::vector<float>*> tensors[] = {
      {"out", &results.out}, {"lse", &results.lse}, {"dq", &results.dq},
      {"dk", &results.dk},   {"dv", &results.dv}};
  for (const auto& [name, tensor] : tensors)
    if (!tensor->empty()) doc[name] = *tensor;
  write_file_atomically(path, "verify --output file '" + path + "'", doc.dump() + "\n");
}

// The CPU ring holds the inputs in double and float, every rank's shards, its K/V and dK/dV
// slots and the gathered results: about 48 bytes per query-side element (q, dout, out, dq) and
// 80 per key-side element (k, v, dk, dv). Past the cap a run would swap or be killed, not check.
constexpr int64_t kCpuMemoryCapBytes = int64_t{4} << 30;

// The most work a CPU backend is given (check_cpu_backend_size): 2^36 pairs on the CPU ring, 2^36
// FLOPs in the emulator, which runs every GPU thread as a fiber (about 0.1 GFLOP/s on a 2-core
// machine: seq_len 1024, 8 heads, head dim 64 in about 20 s).
constexpr double kWorkCap = 68719476736.0;

// What the CPU backends cannot run in memory or in reasonable time, refused
// before any input is drawn: a 128K shape ran out of memory (bad_alloc, exit 1) or for days.
void check_cpu_backend_size(const Problem& p, const std::string& backend) {
  if (backend != "cpu" && backend != "emulated") return;  // the GPU backends have their own memory
  const double q_elements = static_cast<double>(p.batch) * p.q_heads * p.seq_len * p.head_dim;
  const double kv_elements = static_cast<double>(p.batch) * p.kv_heads * p.seq_len * p.head_dim;
  const double bytes = 48 * q_elements + 80 * kv_elements;
  if (bytes > static_cast<double>(kCpuMemoryCapBytes)) {
    char size[64];
    std::snprintf(size, sizeof size, "%.1f GiB", bytes / (1 << 30));
    throw_bad_input("--backend " + backend + ": shape " + p.name + " needs about " + size +
                    " of memory for its full inputs, results and ring buffers; the CPU backends' cap is " +
                    std::to_string(kCpuMemoryCapBytes >> 30) + " GiB (reduce batch, heads or seq_len, or use --backend gpu)");
  }
  // Work a backend would take hours over: the CPU ring's (query, key) pairs (its float64
  // reference and float32 ring visit each, about 5e7 a second here) or the emulator's FLOPs (about
  // 1e8 a second). 2^36 of either is some ten to twenty minutes.
  const bool emulated = backend == "emulated";
  const double work = emulated ? 4.0 * q_elements * static_cast<double>(p.seq_len)
                               : static_cast<double>(p.batch) * p.q_heads * static_cast<double>(p.seq_len) * p.seq_len;
  if (work > kWorkCap) {
    char amount[64];
    std::snprintf(amount, sizeof amount, "%.3g", work);
    throw_bad_input("--backend " + backend + ": shape " + p.name + " is " + amount +
                    (emulated ? " FLOPs" : " (query, key) pairs") + " of attention; the " +
                    (emulated ? "emulator" : "CPU backend") +
                    " takes at most 2^36 (about 6.9e10; reduce batch, heads or seq_len, or use --backend gpu)");
  }
}

// The problem of a --shape entry: scheme and ranks from the entry unless the options name them.
Problem shape_problem(const VerifyOptions& opt) {
  Problem p = parse_shape_json(opt.shape, "--shape");
  if (!opt.scheme.empty()) p.scheme = parse_scheme(opt.scheme);
  if (opt.ranks > 0) p.cp_size = opt.ranks;
  // Any length splits over any ring (runtime/ring/partition.h); every backend runs unequal shards.
  return p;
}

void run_verify(const VerifyOptions& opt) {
  // Exactly one source of the problem.
  if (opt.random != !opt.shape.empty())
    throw_bad_input(opt.random ? "verify: --random needs --shape '{...}' (one shapes entry)"
                               : "verify: --shape needs --random (the inputs are drawn from --seed)");
  if (opt.random == !opt.vectors_path.empty())
    throw_bad_input("verify: give exactly one of --vectors FILE or --shape '{...}' --random");
  if (!opt.random && opt.draw_options_given)
    throw_bad_input("verify: --seed and --sample-rows go with --shape '{...}' --random; a vectors file brings its own inputs");
  if (!opt.random && opt.scheme.empty()) throw_bad_input("verify: --scheme is required with --vectors");
  if (!opt.random && opt.ranks == 0) throw_bad_input("verify: --ranks is required with --vectors");
  if (!opt.scheme.empty()) (void)parse_scheme(opt.scheme);
  // Checked before the run, which may take minutes, rather than when the results are written.
  if (!opt.output_path.empty()) {
    check_output_file(opt.output_path, "verify", "--output");
    check_distinct_files(opt.output_path, "--output", opt.vectors_path, "--vectors", "verify");
  }
  const VerifyBackend* backend = find_verify_backend(opt.backend);
  if (!backend)
    throw_bad_input("--backend '" + opt.backend + "' is not available in this build; allowed: " +
                    join(verify_backend_names()));
  if (!opt.specs.empty() && !backend->takes_spec)
    throw_bad_input("--spec is not taken by --backend " + opt.backend + " (it runs the kernels selection chooses)");
  if (!opt.approx.empty()) {
    if (opt.backend != "emulated")
      throw_bad_input("--approx is taken by --backend emulated only (a GPU's .approx instructions return what they return)");
    bool known = false;
    for (EmulatedApproximation mode : kEmulatedApproximations)
      if (opt.approx == approximation_name(mode)) {
        set_emulated_approximation(mode);
        known = true;
      }
    if (!known) throw_bad_input("--approx '" + opt.approx + "' is not one of exact, high, low, mixed");
  }

  AttentionVectors vec;
  Scheme scheme = Scheme::kZigzag;
  int ranks = opt.ranks;
  std::string dtype = opt.dtype;
  SampledReference sampled;
  std::string layout;  // a --shape's; a vectors file's tensors run bhsd
  if (opt.random) {
    const Problem p = shape_problem(opt);
    layout = p.layout;
    check_cpu_backend_size(p, opt.backend);
    scheme = p.scheme;
    ranks = static_cast<int>(p.cp_size);
    // The entry's dtype is what a half-precision backend computes in; the CPU backend is float32.
    if (dtype.empty() && opt.backend != "cpu") dtype = std::string(dtype_name(p.dtype));
    vec = random_vectors(p, opt.seed);
    sampled.positions = sample_positions(scheme, p.seq_len, ranks, opt.sample_rows, p.documents);
  } else {
    scheme = parse_scheme(opt.scheme);
    vec = load_attention_vectors(opt.vectors_path);
    // A file's shape passes the same size checks as a --shape (a 7 MB file of seq_len 400000
    // would have run for an hour).
    check_cpu_backend_size(problem_from_vectors(vec, ranks, scheme, Dtype::kBf16), opt.backend);
  }

  VerifyRequest request;
  request.vectors_path = opt.vectors_path;
  request.vectors = &vec;
  request.sampled = opt.random ? &sampled : nullptr;
  request.scheme = scheme;
  request.ranks = ranks;
  request.dtype = dtype;
  request.transport = opt.transport;
  request.specs = opt.specs;
  request.layout = layout;
  const VerifyReport report = backend->run(request);
  if (report.checks.empty())
    throw Error(ErrorKind::kInternal, "verify: backend " + opt.backend + " checked nothing");
  std::vector<std::string> failed;
  for (const VerifyCheck& c : report.checks)
    if (!c.passed()) failed.push_back(c.tensor);
  if (!opt.output_path.empty())
    write_results(opt.output_path, vec, opt, scheme, ranks, request.sampled, report.results);
  const std::string rows_note = opt.random ? std::to_string(sampled.positions.size()) + " of " +
                                                 std::to_string(vec.seq_len) + " positions" : "";

  if (opt.json) {
    nlohmann::ordered_json doc;
    if (opt.random) {
      doc["random"] = true;
      doc["seed"] = opt.seed;
      // Every (batch, head) is checked at these positions; dk and dv at the same key positions.
      doc["sampled_positions"] = sampled.positions;
      doc["seq_len"] = vec.seq_len;
    } else {
      doc["vectors"] = opt.vectors_path;
    }
    doc["name"] = vec.name;
    doc["backend"] = opt.backend;
    doc["precision"] = report.precision;
    doc["scheme"] = std::string(scheme_name(scheme));
    doc["ranks"] = ranks;
    if (!opt.approx.empty()) doc["approx"] = opt.approx;
    doc["checks"] = nlohmann::ordered_json::array();
    for (const VerifyCheck& c : report.checks) {
      nlohmann::ordered_json check;
      check["tensor"] = c.tensor;
      check["metric"] = c.metric;
      check["error"] = std::isfinite(c.error) ? nlohmann::ordered_json(c.error) : nullptr;
      check["limit"] = c.limit;
      check["ok"] = c.passed();
      doc["checks"].push_back(check);
    }
    if (!report.notes.empty()) doc["notes"] = report.notes;
    doc["ok"] = failed.empty();
    doc["failed"] = failed;
    if (!opt.output_path.empty()) doc["output"] = opt.output_path;
    std::cout << doc.dump(2) << "\n";
  } else {
    std::printf("verify %s: backend %s (%s), %s over %d rank%s\n", vec.name.c_str(),
                opt.backend.c_str(), report.precision.c_str(),
                std::string(scheme_name(scheme)).c_str(), ranks, ranks == 1 ? "" : "s");
    if (!opt.approx.empty())
      std::printf("  .approx instructions (ex2, rcp): %s\n",
                  opt.approx == "exact"   ? "correctly rounded"
                  : opt.approx == "mixed" ? "at either edge of the PTX ISA's error bound, by the input"
                                          : ("at the " + opt.approx + " edge of the PTX ISA's error bound").c_str());
    if (opt.random)
      std::printf("  random inputs, seed %llu; float64 reference at %s of every (batch, head)\n"
                  "  (first and last of every rank's shard, the rest spread evenly):\n",
                  static_cast<unsigned long long>(opt.seed), rows_note.c_str());
    else
      std::printf("  against %s:\n", opt.vectors_path.c_str());
    for (const VerifyCheck& c : report.checks)
      std::printf("    %-4s %-19s %.3e  (limit %.0e)  %s\n", c.tensor.c_str(), c.metric.c_str(),
                  c.error, c.limit, c.passed() ? "ok" : "FAIL");
    for (const std::string& note : report.notes) std::printf("  note: %s\n", note.c_str());
    if (!opt.output_path.empty()) std::printf("  results written to %s\n", opt.output_path.c_str());
    std::printf("%s\n",
                failed.empty() ? "ok" : ("FAILED: " + join(failed) + " above the limit").c_str());
  }
  if (!failed.empty()) set_exit_code(1);
}

const CommandRegistrar kVerify("verify", [](CLI::App& root) {
  auto opt = std::make_shared<VerifyOptions>();
  CLI::App* cmd = root.add_subcommand(
      "verify",
      "Run a problem through the ring and report its errors: a reference vectors file, or a shapes "
      "entry on random inputs checked against the float64 reference on sampled positions");
  cmd->add_option("--vectors", opt->vectors_path, "vectors file (format cpgen-attention-vectors/1 or /2)");
  cmd->add_option("--shape", opt->shape,
                  "one shapes-file entry as JSON, e.g. '{\"q_heads\": 8, \"kv_heads\": 2, \"head_dim\": 64, "
                  "\"seq_len\": 1024, \"cp_size\": 4, \"dtype\": \"bf16\", \"causal\": true}' (with --random)");
  cmd->add_flag("--random", opt->random,
                "run the --shape entry on random inputs (multiples of 1/32, exact in bf16 and fp16) and "
                "check every (batch, head) against the float64 reference at 256 positions (every one "
                "when seq_len is smaller): the first and last of every rank's shard and the rest spread "
                "evenly over the sequence (dk, dv at the same key positions). The backend runs the "
                "whole problem; --backend cpu refuses one needing over 4 GiB");
  cmd->add_option("--seed", opt->seed, "seed of the --random inputs; the report prints it")
      ->capture_default_str()
      ->check(int_range(0, INT64_MAX))
      ->each([opt](const std::string&) { opt->draw_options_given = true; });
  // How many positions are sampled (the default keeps a 128K shape's check short).
  cmd->add_option("--sample-rows", opt->sample_rows,
                  "sequence positions the float64 check of a --random shape samples (every shard's ends among them)")
      ->capture_default_str()
      ->check(int_range(2, int64_t{1} << 20))
      ->each([opt](const std::string&) { opt->draw_options_given = true; });
  cmd->add_option("--scheme", opt->scheme,
                  "partition scheme: contiguous, zigzag, zigzag-token, striped (required with --vectors; "
                  "default with --shape: the entry's)");
  cmd->add_option("--ranks", opt->ranks,
                  "context-parallel ranks, virtual on this machine (required with --vectors; default "
                  "with --shape: the entry's cp_size)")
      ->check(int_range(1, kMaxCpSize));
  std::string backends_help = "where the ring runs:";
  for (const std::string& name : verify_backend_names())
    backends_help += " " + name + " (" + find_verify_backend(name)->summary + ")";
  cmd->add_option("--backend", opt->backend, backends_help)->capture_default_str();
  cmd->add_option("--dtype", opt->dtype, "element type, if the backend takes one (cpu: fp32; a half-precision backend defaults to "
                  "the --shape entry's dtype)");
  cmd->add_option("--transport", opt->transport,
                  "how ranks exchange data, if the backend has a choice (cpu: threads)");
  cmd->add_option("--spec", opt->specs,
                  "kernel URI to run (--backend emulated): URI for every step type of its direction (ring_fwd_... "
                  "forward, ring_bwd_... backward), or STEP=URI for one (STEP: diagonal, full, zigzag-kv-half, "
                  "zigzag-q-half, and bwd- before each for the backward); 'wgmma': the sm_90a family's default tiles "
                  "for the problem; 'wgmma-pingpong': the same in the ping-pong schedule; 'wgmma-persistent': the same in "
                  "the persistent launch; 'mma.sync': that family's default tiles; default: what selection chooses");
  cmd->add_option("--approx", opt->approx,
                  "what the emulator's .approx instructions (ex2, rcp) return (--backend emulated): exact (the "
                  "correctly rounded value, the default), high or low (every result at that edge of the PTX ISA's "
                  "error bound: ex2 2 ulp, rcp 1 ulp), mixed (either edge by the input)");
  cmd->add_option("--output", opt->output_path,
                  "write the gathered out, lse, dq, dk, dv as JSON (the vectors file's layout)");
  cmd->add_flag("--json", opt->json, "print the report as JSON");
  cmd->callback([opt] { run_verify(*opt); });
});

}  // namespace
}  // namespace cpgen::cli
