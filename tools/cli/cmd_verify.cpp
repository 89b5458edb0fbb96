// cpgen verify: run a reference vectors problem through the whole ring (split, forward, backward,
// gather) on a backend and report the relative error of every output against the file.
// Exit 0 when every error is within the backend's tolerance, 1 above it, 2 for bad input.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cpgen/error.h"
#include "runtime/ring/partition.h"
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
  std::string scheme;
  int ranks = 1;
  std::string backend = "cpu";
  std::string dtype;
  std::string transport;
  std::string output_path;
  bool json = false;
};

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

void write_results(const std::string& path, const AttentionVectors& vec,
                   const VerifyOptions& opt, Scheme scheme, const VerifyResults& results) {
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
  doc["window"] = vec.shape.window > 0 ? nlohmann::ordered_json(vec.shape.window) : nullptr;
  doc["softmax_scale"] = vec.shape.scale;
  doc["tensor_layout"] =
      "[batch][heads][seq][head_dim], row-major, sequence in global position order";
  doc["backend"] = opt.backend;
  doc["scheme"] = std::string(scheme_name(scheme));
  doc["cp_size"] = opt.ranks;
  const std::pair<const char*, const std::vector<float>*> tensors[] = {
      {"out", &results.out}, {"lse", &results.lse}, {"dq", &results.dq},
      {"dk", &results.dk},   {"dv", &results.dv}};
  for (const auto& [name, tensor] : tensors)
    if (!tensor->empty()) doc[name] = *tensor;
  std::ofstream out(path);
  if (!out) throw Error(ErrorKind::kIo, "verify: cannot write --output file '" + path + "'");
  out << doc.dump() << "\n";
  out.close();
  if (!out) throw Error(ErrorKind::kIo, "verify: writing --output file '" + path + "' failed");
}

void run_verify(const VerifyOptions& opt) {
  const Scheme scheme = parse_scheme(opt.scheme);
  // Checked before the run, which may take minutes, rather than when the results are written.
  if (!opt.output_path.empty()) check_output_file(opt.output_path, "verify", "--output");
  const VerifyBackend* backend = find_verify_backend(opt.backend);
  if (!backend)
    throw_bad_input("--backend '" + opt.backend + "' is not available in this build; allowed: " +
                    join(verify_backend_names()));
  const AttentionVectors vec = load_attention_vectors(opt.vectors_path);
  try {
    check_partitionable(scheme, vec.seq_len, opt.ranks);
  } catch (const Error& e) {
    throw_bad_input("--ranks " + std::to_string(opt.ranks) + " cannot split " + vec.name + ": " +
                    e.what());
  }

  VerifyRequest request;
  request.vectors_path = opt.vectors_path;
  request.vectors = &vec;
  request.scheme = scheme;
  request.ranks = opt.ranks;
  request.dtype = opt.dtype;
  request.transport = opt.transport;
  const VerifyReport report = backend->run(request);
  if (report.checks.empty())
    throw Error(ErrorKind::kInternal, "verify: backend " + opt.backend + " checked nothing");
  std::vector<std::string> failed;
  for (const VerifyCheck& c : report.checks)
    if (!c.passed()) failed.push_back(c.tensor);
  if (!opt.output_path.empty()) write_results(opt.output_path, vec, opt, scheme, report.results);

  if (opt.json) {
    nlohmann::ordered_json doc;
    doc["vectors"] = opt.vectors_path;
    doc["name"] = vec.name;
    doc["backend"] = opt.backend;
    doc["precision"] = report.precision;
    doc["scheme"] = std::string(scheme_name(scheme));
    doc["ranks"] = opt.ranks;
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
    doc["ok"] = failed.empty();
    doc["failed"] = failed;
    if (!opt.output_path.empty()) doc["output"] = opt.output_path;
    std::cout << doc.dump(2) << "\n";
  } else {
    std::printf("verify %s: backend %s (%s), %s over %d rank%s\n", vec.name.c_str(),
                opt.backend.c_str(), report.precision.c_str(),
                std::string(scheme_name(scheme)).c_str(), opt.ranks, opt.ranks == 1 ? "" : "s");
    std::printf("  against %s:\n", opt.vectors_path.c_str());
    for (const VerifyCheck& c : report.checks)
      std::printf("    %-4s %-19s %.3e  (limit %.0e)  %s\n", c.tensor.c_str(), c.metric.c_str(),
                  c.error, c.limit, c.passed() ? "ok" : "FAIL");
    if (!opt.output_path.empty()) std::printf("  results written to %s\n", opt.output_path.c_str());
    std::printf("%s\n",
                failed.empty() ? "ok" : ("FAILED: " + join(failed) + " above the limit").c_str());
  }
  std::fflush(stdout);
  if (!failed.empty()) set_exit_code(1);
}

const CommandRegistrar kVerify("verify", [](CLI::App& root) {
  auto opt = std::make_shared<VerifyOptions>();
  CLI::App* cmd = root.add_subcommand(
      "verify", "Run a reference vectors file through the ring and report relative errors");
  cmd->add_option("--vectors", opt->vectors_path, "vectors file (format cpgen-attention-vectors/1)")
      ->required();
  cmd->add_option("--scheme", opt->scheme, "partition scheme: contiguous, zigzag, zigzag-token, striped")
      ->required();
  cmd->add_option("--ranks", opt->ranks, "context-parallel ranks (virtual ranks on this machine)")
      ->required()
      ->check(int_range(1, kMaxCpSize));
  std::string backends_help = "where the ring runs:";
  for (const std::string& name : verify_backend_names())
    backends_help += " " + name + " (" + find_verify_backend(name)->summary + ")";
  cmd->add_option("--backend", opt->backend, backends_help)->capture_default_str();
  cmd->add_option("--dtype", opt->dtype, "element type, if the backend takes one (cpu: fp32)");
  cmd->add_option("--transport", opt->transport,
                  "how ranks exchange data, if the backend has a choice (cpu: threads)");
  cmd->add_option("--output", opt->output_path,
                  "write the gathered out, lse, dq, dk, dv as JSON (the vectors file's layout)");
  cmd->add_flag("--json", opt->json, "print the report as JSON");
  cmd->callback([opt] { run_verify(*opt); });
});

}  // namespace
}  // namespace cpgen::cli
