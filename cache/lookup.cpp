#include "cache/lookup.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <tuple>
#include <cstdlib>
#include <utility>
#include <vector>

#include "cache/records.h"
#include "cpgen/error.h"
#include "generator/kernel_spec_wgmma.h"
#include "runtime/core/enum_names.h"
#include "runtime/ring/kernel_support.h"

namespace cpgen {
namespace {

// log2 distance between two lengths' buckets.
int bucket_distance(const WorkloadKey& a, const WorkloadKey& b) {
  return std::abs(static_cast<int>(std::log2(static_cast<double>(a.seq_bucket()))) -
                  static_cast<int>(std::log2(static_cast<double>(b.seq_bucket()))));
}

// A record names a kernel; it is only usable for w if the kernel was built for w's dtype, head
// dim, mask and group (a hand-edited or damaged row could say otherwise) and fits w's arch (a
// shipped pattern entry may name a tile too big for a smaller GPU's shared memory).
std::optional<KernelSpec> usable_spec(const std::string& uri, const WorkloadKey& w) {
  try {
    KernelSpec s = KernelSpec::parse(uri);
    // A forward step runs a forward kernel and a backward step a backward one, whatever a
    // (hand-edited or damaged) record says.
    if (!runs_step(s.kind, is_backward(w.step))) return std::nullopt;
    if (s.dtype != w.dtype || s.head_dim != w.head_dim || s.causal != w.causal || s.gqa_group != w.gqa_group()) return std::nullopt;
    if (s.key_intervals != w.mask.key_intervals() || s.softcap != w.mask.softcap) return std::nullopt;
    if (!check_feasibility(s, w.arch).feasible) return std::nullopt;
    return s;
  } catch (const Error&) {
    return std::nullopt;
  }
}

// best_record's rule for a cache folder: a workload whose winner entry there was timed on this
// GPU class on a kernel whose code has changed since answers no more, by any of that folder's
// entries. Another folder's entries of the workload (a site's newer tune) keep answering.
bool cache_winner_changed(const PretunedCaches& caches, const WorkloadKey& ew, int dir_index, const Environment& env) {
  for (const CacheEntry& e : caches.entries) {
    if (!e.winner || !e.record || e.dir_index != dir_index || !(e.record->workload == ew)) continue;
    const Environment here = env.for_kernel(e.record->kernel_uri);
    return e.record->env.gpu_name == here.gpu_name && e.record->env.sm_count == here.sm_count &&
           e.record->env.template_hash != here.template_hash;
  }
  return false;
}

bool same_except_lengths(WorkloadKey a, WorkloadKey b) {
  a.q_len = b.q_len;
  a.kv_len = b.kv_len;
  return a == b;
}

// Pretuned entries are trusted for the same kernel code on the same device class; the NVRTC
// and driver of a user's machine rarely match the vendor's exactly.
bool pretuned_env_matches(const Environment& entry, const Environment& env) {
  return entry.template_hash == env.template_hash && entry.gpu_name == env.gpu_name && entry.sm_count == env.sm_count;
}

std::string ms_text(double ms) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.4g ms", ms);
  return buf;
}

}  // namespace

constexpr std::pair<ConfigSource, std::string_view> kConfigSourceNames[] = {
    {ConfigSource::kDatabaseExact, "database-exact"},
    {ConfigSource::kDatabaseBucket, "database-bucket"},
    {ConfigSource::kPretunedExact, "pretuned-exact"},
    {ConfigSource::kPretunedBucket, "pretuned-bucket"},
    {ConfigSource::kPretunedPattern, "pretuned-pattern"},
    {ConfigSource::kDefault, "default"}};

std::string_view config_source_name(ConfigSource source) {
  return enum_name<ConfigSource>(kConfigSourceNames, source, "config_source_name");
}

// The documented default of w's direction (sel's spec, origin and source; the rest is the
// caller's): on a known target one that fits its shared memory (the 99 KB ones need smaller
// tiles), for a backward step type the backward kernel.
static void use_documented_default(const WorkloadKey& w, Selection& sel) {
  const bool known_arch = std::ranges::find(kSupportedArchs, std::string_view(w.arch)) != std::end(kSupportedArchs);
  if (is_backward(w.step)) {
    sel.spec = known_arch ? KernelSpec::backward_default_for_arch(w.dtype, w.head_dim, w.causal, w.gqa_group(), w.arch)
                          : KernelSpec::backward_default_for(w.dtype, w.head_dim, w.causal, w.gqa_group());
    sel.origin = "KernelSpec::backward_default_for";
  } else {
    sel.spec = known_arch ? forward_default_for_arch(w.dtype, w.head_dim, w.causal, w.gqa_group(), w.arch)
                          : KernelSpec::default_for(w.dtype, w.head_dim, w.causal, w.gqa_group());
    sel.origin = sel.spec.kind == KernelKind::kForwardWgmma ? "forward_default_for_arch" : "KernelSpec::default_for";
  }
  sel.source = ConfigSource::kDefault;
}

// The lookup order of lookup.h for w; with database_only, steps 1 and 2 alone (a selection whose
// source is kDefault then means the database had nothing usable).
static Selection select_in_order(const WorkloadKey& w, Database* db, const Environment& env, const PretunedCaches& caches,
                                 bool database_only) {
  Selection sel;
  std::string ignored_note;
  if (db) {
    BestRecord best = best_record(*db, w, env);
    sel.ignored_other_environment += best.other_environment;
    const bool winner_changed = best.winner_changed;
    if (best.record) {
      if (auto spec = usable_spec(best.record->kernel_uri, w)) {
        sel.spec = *spec;
        sel.source = ConfigSource::kDatabaseExact;
        sel.origin = db->path();
        sel.matched = w;
        sel.median_ms = best.record->median_ms;
        sel.reason = "tuned for this exact workload (median " + ms_text(*best.record->median_ms) + ")";
        return sel;
      }
    }
    std::vector<WorkloadKey> siblings = sibling_workloads(*db, w);
    std::stable_sort(siblings.begin(), siblings.end(), [&](const WorkloadKey& a, const WorkloadKey& b) {
      int da = bucket_distance(a, w), dbb = bucket_distance(b, w);
      return da != dbb ? da < dbb : a.q_len < b.q_len;
    });
    for (const WorkloadKey& sibling : siblings) {
      if (sibling == w) continue;
      BestRecord near = best_record(*db, sibling, env);
      sel.ignored_other_environment += near.other_environment;
      if (!near.record) continue;
      auto spec = usable_spec(near.record->kernel_uri, w);
      if (!spec) continue;
      sel.spec = *spec;
      sel.source = ConfigSource::kDatabaseBucket;
      sel.origin = db->path();
      sel.matched = sibling;
      sel.median_ms = near.record->median_ms;
      sel.reason = "no record for q_len " + std::to_string(w.q_len) + "; nearest tuned bucket is q_len " +
                   std::to_string(sibling.q_len) + " (median " + ms_text(*near.record->median_ms) + " there)";
      return sel;
    }
    if (sel.ignored_other_environment > 0) {
      ignored_note = "; " + std::to_string(sel.ignored_other_environment) +
                     " database record(s) of another environment were ignored";
    }
    if (winner_changed) ignored_note += " (the tuned winner's kernel has changed since it was timed: tune again)";
  }

  if (database_only) return sel;

  // Pretuned caches: measured entries first (exact, then nearest bucket), then patterns.
  const CacheEntry* chosen = nullptr;
  int chosen_rank = 0;  // 0 exact, 1 + distance for a bucket; patterns handled below
  // cache_winner_changed of each workload and folder asked about, found once (it scans every entry).
  struct Changed {
    const WorkloadKey* workload;
    int dir_index;
    bool changed;
  };
  std::vector<Changed> changed;
  auto winner_changed_of = [&](const WorkloadKey& ew, int dir_index) {
    for (const Changed& c : changed)
      if (c.dir_index == dir_index && *c.workload == ew) return c.changed;
    changed.push_back({&ew, dir_index, cache_winner_changed(caches, ew, dir_index, env)});
    return changed.back().changed;
  };
  for (const CacheEntry& entry : caches.entries) {
    if (!entry.record || !entry.record->valid()) continue;
    const WorkloadKey& ew = entry.record->workload;
    if (!same_except_lengths(ew, w) || !usable_spec(entry.kernel_uri, w)) continue;
    // The code hash last: the first selection of a process hashes each kernel it asks about.
    if (!pretuned_env_matches(entry.record->env, env.for_kernel(entry.record->kernel_uri))) continue;
    if (winner_changed_of(ew, entry.dir_index)) continue;
    int rank = ew == w ? 0 : 1 + bucket_distance(ew, w);
    // The nearest workload; then the folder searched first (a site's $CPGEN_CACHES_DIR over the
    // shipped caches); then a winner; then the fastest.
    const auto order = [](const CacheEntry& e, int r) {
      return std::make_tuple(r, e.dir_index, e.winner ? 0 : 1, *e.record->median_ms);
    };
    bool better = !chosen || order(entry, rank) < order(*chosen, chosen_rank);
    if (better) {
      chosen = &entry;
      chosen_rank = rank;
    }
  }
  if (chosen) {
    sel.spec = *usable_spec(chosen->kernel_uri, w);
    sel.source = chosen_rank == 0 ? ConfigSource::kPretunedExact : ConfigSource::kPretunedBucket;
    sel.origin = chosen->file;
    sel.matched = chosen->record->workload;
    sel.median_ms = chosen->record->median_ms;
    sel.reason = (chosen_rank == 0 ? std::string("pretuned for this exact workload")
                                   : "pretuned for the nearest bucket, q_len " + std::to_string(chosen->record->workload.q_len)) +
                 " (median " + ms_text(*chosen->record->median_ms) + " where it was measured)" + ignored_note;
    return sel;
  }
  const nlohmann::json w_json = w.to_json();
  for (const CacheEntry& entry : caches.entries) {
    if (entry.record || !pattern_matches(entry.workload, w, w_json)) continue;
    auto spec = usable_spec(entry.kernel_uri, w);
    if (!spec) continue;
    sel.spec = *spec;
    sel.source = ConfigSource::kPretunedPattern;
    sel.origin = entry.file;
    sel.reason = "no tuned record; a shipped cache entry matching " + entry.workload.dump() + " applies (never timed)" + ignored_note;
    return sel;
  }

  use_documented_default(w, sel);
  sel.reason = "no tuned record and no pretuned cache entry; using the documented default" + ignored_note;
  return sel;
}

Selection select_config(const WorkloadKey& w, Database* db, const Environment& env, const PretunedCaches& caches) {
  if (!w.mask.any()) return select_in_order(w, db, env, caches, false);
  // A masked workload tuned in this database (exactly or at the nearest bucket of the same mask)
  // names a masked kernel already.
  Selection masked = select_in_order(w, db, env, caches, true);
  if (masked.source != ConfigSource::kDefault) {
    masked.reason = "masked workload (" + w.mask.name() + ") " + masked.reason;
    return masked;
  }
  // Never tuned with this mask: the unmasked shape's config, specialized on the mask. Shipped
  // caches hold unmasked workloads only, so they serve here.
  Selection sel = select_in_order(w.unmasked(), db, env, caches, false);
  const KernelFamilyAbilities family = kernel_family_abilities(sel.spec.kind);
  if ((w.mask.key_intervals() && !family.key_intervals) || (w.mask.softcap && !family.softcap)) {
    // The unmasked winner's family has no kernel with this mask (runtime/ring/kernel_support.h):
    // the documented default, which does, specialized on the mask.
    // The mma.sync family's default, which has every mask, for a forward step (the arch's
    // documented default may be the family that lacks it), and the backward default for a
    // backward step (the forward one was taken for both).
    sel.reason = "the unmasked shape's " + sel.spec.uri() + " has no kernel with this mask; " +
                 "using the documented default";
    if (is_backward(w.step)) {
      use_documented_default(w, sel);
    } else {
      sel.spec = KernelSpec::default_for_arch(w.dtype, w.head_dim, w.causal, w.gqa_group(), w.arch);
      sel.source = ConfigSource::kDefault;
      sel.origin = "KernelSpec::default_for";
    }
    sel.matched.reset();
    sel.median_ms.reset();
  }
  sel.spec.key_intervals = w.mask.key_intervals();
  sel.spec.softcap = w.mask.softcap;
  sel.ignored_other_environment += masked.ignored_other_environment;
  sel.reason = "no record for the masked workload (" + w.mask.name() + "); the unmasked shape's config, specialized on the mask: " +
               sel.reason;
  return sel;
}

std::vector<StepSelection> select_for_problem(const Problem& p, const DeviceClass& device, Database* db,
                                              const Environment& env, const PretunedCaches& caches) {
  std::vector<StepSelection> out;
  for (const WorkloadKey& w : workloads_for(p, device)) out.push_back({w, select_config(w, db, env, caches)});
  return out;
}

}  // namespace cpgen
