// cpgen plan --shapes FILE | --shape JSON [--link-gbps G] [--tflops T] [--json]
// Compares the four partition schemes for each shape: causal work balance, ring traffic and
// memory, whether the K/V transfer hides behind compute, and which scheme to use.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <tuple>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpgen/error.h"
#include "runtime/ring/plan.h"
#include "runtime/ring/shapes.h"
#include "tools/cli/command.h"
#include "tools/cli/int_range.h"
#include "tools/cli/shape_options.h"
#include "tools/cli/slow_progress.h"

namespace cpgen::cli {
namespace {

struct PlanArgs {
  std::string shapes;
  std::string shape;
  double link_gbps = PlanRates{}.link_gbps;
  double tflops = PlanRates{}.tflops;
  bool json = false;
};

std::string bytes_text(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB"};
  double value = bytes;
  int unit = 0;
  while (value >= 1024 && unit < 7) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, kUnits[unit]);
  return text;
}

std::string seconds_text(double seconds) {
  char text[352];  // room for any double in %.2f (a rate of 1e-300 gives a time near 1e300 s)
  if (seconds >= 1) std::snprintf(text, sizeof text, "%.2f s", seconds);
  else if (seconds >= 1e-3) std::snprintf(text, sizeof text, "%.2f ms", seconds * 1e3);
  else std::snprintf(text, sizeof text, "%.1f us", seconds * 1e6);
  return text;
}

nlohmann::json entry_json(const ShapePlan& shape, const SchemePlan& s) {
  nlohmann::json e;
  e["shape"] = shape.problem.name;
  e["scheme"] = std::string(scheme_name(s.scheme));
  e["applicable"] = s.applicable;
  e["recommended"] = s.scheme == shape.recommended;
  e["rank_tokens"] = s.tokens.rank_tokens;
  e["token_imbalance"] = s.tokens.token_imbalance;
  e["ring_steps"] = s.tokens.ring_steps;
  e["skipped_steps"] = s.tokens.skipped_steps >= 0 ? nlohmann::json(s.tokens.skipped_steps) : nullptr;
  // [rank][step] visible (query, key) pairs per batch entry and head; null where not counted.
  e["visible_pairs"] = s.tokens.visible_pairs.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.tokens.visible_pairs);
  e["work_model"] = s.pair_model ? "visible pairs" : "tiles";
  if (!s.applicable) {
    e["reason"] = s.reason;
    for (const char* key : {"work_imbalance", "busiest_rank_tflop", "bytes_per_step", "bytes_total",
                            "ring_extra_bytes", "allgather_extra_bytes", "step_compute_us", "step_comm_us",
                            "compute_comm_ratio", "comm_hidden", "forward_ms"}) {
      e[key] = nullptr;
    }
    return e;
  }
  e["work_imbalance"] = s.work_imbalance;
  e["busiest_rank_tflop"] = s.busiest_rank_flops / 1e12;
  e["bytes_per_step"] = s.bytes_per_step;
  // An integer where the double holds it exactly (2^53), as the other byte counts are.
  e["bytes_total"] = s.bytes_total <= 0x1p53 ? nlohmann::json(static_cast<int64_t>(s.bytes_total)) : nlohmann::json(s.bytes_total);
  e["ring_extra_bytes"] = s.ring_extra_bytes;
  e["allgather_extra_bytes"] = s.allgather_extra_bytes;
  e["step_compute_us"] = s.step_compute_s * 1e6;
  e["step_comm_us"] = s.step_comm_s * 1e6;
  // JSON has no infinity: with one rank nothing travels and the ratio is null.
  e["compute_comm_ratio"] = std::isfinite(s.compute_comm_ratio) ? nlohmann::json(s.compute_comm_ratio) : nullptr;
  e["comm_hidden"] = s.comm_hidden;
  e["forward_ms"] = s.forward_s * 1e3;
  e["tile_coarsening"] = s.tile_coarsening;
  return e;
}

void print_json(const std::vector<ShapePlan>& plans, const PlanRates& rates) {
  nlohmann::json out;
  out["link_gbps"] = rates.link_gbps;
  out["tflops"] = rates.tflops;
  out["entries"] = nlohmann::json::array();
  out["shapes"] = nlohmann::json::array();
  for (const ShapePlan& shape : plans) {
    for (const SchemePlan& s : shape.schemes) out["entries"].push_back(entry_json(shape, s));
    out["shapes"].push_back({{"shape", shape.problem.name},
                             {"file_scheme", std::string(scheme_name(shape.problem.scheme))},
                             {"tile", shape.tile.uri()},
                             {"recommended", std::string(scheme_name(shape.recommended))},
                             {"why", shape.why}});
  }
  std::cout << out.dump(2) << "\n";
}

void print_table(const std::vector<ShapePlan>& plans, const PlanRates& rates) {
  std::printf("rates: link %.4g GB/s per direction, compute %.4g TFLOP/s per GPU (forward pass)\n",
              rates.link_gbps, rates.tflops);
  for (const ShapePlan& shape : plans) {
    const Problem& p = shape.problem;
    // The mask as the shape gave it, so a reader sees what was understood.
    std::string mask;
    if (p.documents.size() > 1) mask += ", " + std::to_string(p.documents.size()) + " documents";
    if (p.has_window())
      mask += ", window (" + (p.window_left >= 0 ? std::to_string(p.window_left) : std::string("unbounded")) + ", " +
              (p.causal ? std::string("causal") : p.window_right >= 0 ? std::to_string(p.window_right) : "unbounded") + ")";
    if (p.softcap > 0) {
      char cap[48];
      std::snprintf(cap, sizeof cap, ", softcap %.4g", p.softcap);
      mask += cap;
    }
    std::printf("\n%s: batch %lld, heads %lld/%lld (GQA %lld), head_dim %lld, seq_len %lld, cp_size %lld, %s, %s%s; "
                "its scheme %s\n",
                p.name.c_str(), (long long)p.batch, (long long)p.q_heads, (long long)p.kv_heads,
                (long long)p.gqa_group(), (long long)p.head_dim, (long long)p.seq_len, (long long)p.cp_size,
                std::string(dtype_name(p.dtype)).c_str(), p.causal ? "causal" : "non-causal", mask.c_str(),
                std::string(scheme_name(p.scheme)).c_str());
    if (uses_pair_model(p))
      std::printf("  work counted as the (query, key) pairs the mask leaves visible, per rank and step\n");
    else
      std::printf("  work counted in the tiles of %s\n", shape.tile.uri().c_str());
    std::printf("  %-13s %9s %11s %11s %11s %7s %6s %11s %11s %11s %11s %10s\n", "scheme", "imbalance",
                "max TFLOP", "step comp", "step comm", "ratio", "hidden", "K/V step", "K/V total", "ring mem",
                "gather mem", "forward");
    for (const SchemePlan& s : shape.schemes) {
      const std::string name(scheme_name(s.scheme));
      if (!s.applicable) std::printf("  %-13s not applicable: %s\n", name.c_str(), s.reason.c_str());
      const auto [fewest, most] = std::minmax_element(s.tokens.rank_tokens.begin(), s.tokens.rank_tokens.end());
      const std::string skipped = s.tokens.skipped_steps >= 0 ? std::to_string(s.tokens.skipped_steps) : "not counted";
      const auto print_tokens = [&] {
        std::printf("  %-13s tokens per rank %lld..%lld (imbalance %.3f); ring steps skipped by the mask: %s of %lld\n",
                    "", static_cast<long long>(*fewest), static_cast<long long>(*most), s.tokens.token_imbalance,
                    skipped.c_str(), static_cast<long long>(s.tokens.ring_steps));
      };
      if (!s.applicable) {
        print_tokens();
        continue;
      }
      char ratio[16];
      if (std::isfinite(s.compute_comm_ratio)) std::snprintf(ratio, sizeof ratio, "%.2f", s.compute_comm_ratio);
      else std::snprintf(ratio, sizeof ratio, "-");
      std::printf("  %-13s %9.3f %11.2f %11s %11s %7s %6s %11s %11s %11s %11s %10s%s\n", name.c_str(),
                  s.work_imbalance, s.busiest_rank_flops / 1e12, seconds_text(s.step_compute_s).c_str(),
                  seconds_text(s.step_comm_s).c_str(), ratio, s.comm_hidden ? "yes" : "no",
                  bytes_text(s.bytes_per_step).c_str(), bytes_text(s.bytes_total).c_str(),
                  bytes_text(s.ring_extra_bytes).c_str(), bytes_text(s.allgather_extra_bytes).c_str(),
                  seconds_text(s.forward_s).c_str(), s.tile_coarsening > 1 ? " (coarse tiles)" : "");
      print_tokens();
    }
    std::printf("  recommended: %s (%s)\n", std::string(scheme_name(shape.recommended)).c_str(), shape.why.c_str());
  }
  std::printf(
      "\nimbalance: busiest rank's FLOPs / mean; step comp: busiest rank's FLOPs per step; step comm: one K/V "
      "chunk over the link;\nratio: step comp / step comm (>= 1: the transfer hides); K/V total: all ranks, "
      "whole forward; ring mem: 2 K/V chunk buffers per rank;\ngather mem: extra K/V per rank for an all-gather "
      "instead of the ring.\n");
}

// Every field of a problem but its name: what a plan depends on. The mask fields and the layout
// were left out, so a shape with documents or a window took the plan of the same shape without.
using ProblemKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool, int, double,
                              std::vector<int64_t>, int64_t, int64_t, double, std::string>;
ProblemKey key_of(const Problem& p) {
  return {p.batch,  p.q_heads,        p.kv_heads,  p.head_dim,    p.seq_len,
          p.cp_size, static_cast<int>(p.dtype), p.causal, static_cast<int>(p.scheme), p.softmax_scale,
          p.documents, p.window_left,   p.window_right, p.softcap, p.layout};
}

void run_plan(const PlanArgs& args) {
  const PlanRates rates{args.link_gbps, args.tflops};
  validate_rates(rates);
  const std::vector<Problem> problems = problems_of_options(args.shape, args.shapes, "plan");
  // Plan everything before printing, so that a failure leaves stdout empty.
  std::vector<ShapePlan> plans;
  plans.reserve(problems.size());
  // Large files repeat a shape under many names; each distinct problem is planned once.
  std::map<ProblemKey, size_t> planned;
  RankWorkCache shared_work;
  SlowProgress progress("plan", problems.size());
  for (const Problem& p : problems) {
    const auto [it, fresh] = planned.emplace(key_of(p), plans.size());
    if (fresh) {
      plans.push_back(plan_shape(p, rates, &shared_work));
    } else {
      plans.push_back(plans[it->second]);
      plans.back().problem.name = p.name;
    }
    progress.advance();
  }
  if (args.json) print_json(plans, rates);
  else print_table(plans, rates);
}

const CommandRegistrar kPlan("plan", [](CLI::App& root) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = root.add_subcommand(
      "plan", "Compare partition schemes per shape: causal work balance, ring traffic and memory, overlap");
  cmd->add_option("--shapes", args->shapes, "shapes file (JSON, see examples/shapes)");
  cmd->add_option("--shape", args->shape, "one shape as a JSON object, the fields of a shapes file entry");
  cmd->add_option("--link-gbps", args->link_gbps,
                  "link bandwidth between ring neighbours per direction, in GB/s (10^9 bytes/s, not gigabits)")
      ->capture_default_str()
      ->check(number_at_least(0, " (GB/s, 10^9 bytes per second)", /*strict=*/true));
  cmd->add_option("--tflops", args->tflops, "sustained attention throughput per GPU, in TFLOP/s")
      ->capture_default_str()
      ->check(number_at_least(0, " (10^12 FLOP/s)", /*strict=*/true));
  cmd->add_flag("--json", args->json, "print JSON: one entry per (shape, scheme) and the recommendation per shape");
  cmd->callback([args] { run_plan(*args); });
});

}  // namespace
}  // namespace cpgen::cli
