#include "cache/workload.h"

#include <algorithm>
#include <optional>
#include <type_traits>

#include "cache/json_integer.h"

#include "cpgen/error.h"
#include "runtime/core/enum_names.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/schedule.h"

namespace cpgen {
namespace {

template <typename T>
T field(const nlohmann::json& j, const char* name) {
  if (!j.contains(name)) throw_bad_input(std::string("workload field '") + name + "' is missing");
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const std::optional<T> value = exact_integer<T>(j[name]);
    if (!value)
      throw_bad_input(std::string("workload field '") + name + "' must be " + integer_range_text<T>() + ", got " +
                      j[name].dump());
    return *value;
  }
  try {
    return j[name].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw_bad_input(std::string("workload field '") + name + "' has the wrong type (" + j[name].dump() + ")");
  }
}

}  // namespace

constexpr std::pair<StepType, std::string_view> kStepTypeNames[] = {
    {StepType::kDiagonal, "diagonal"},
    {StepType::kFull, "full"},
    {StepType::kZigzagKvHalf, "zigzag-kv-half"},
    {StepType::kZigzagQHalf, "zigzag-q-half"},
    {StepType::kBwdDiagonal, "bwd-diagonal"},
    {StepType::kBwdFull, "bwd-full"},
    {StepType::kBwdZigzagKvHalf, "bwd-zigzag-kv-half"},
    {StepType::kBwdZigzagQHalf, "bwd-zigzag-q-half"}};

// Each forward step type and its backward counterpart of the same shape.
constexpr std::pair<StepType, StepType> kBackwardOf[] = {
    {StepType::kDiagonal, StepType::kBwdDiagonal},
    {StepType::kFull, StepType::kBwdFull},
    {StepType::kZigzagKvHalf, StepType::kBwdZigzagKvHalf},
    {StepType::kZigzagQHalf, StepType::kBwdZigzagQHalf}};

bool is_backward(StepType step) {
  for (const auto& [fwd, bwd] : kBackwardOf)
    if (step == bwd) return true;
  return false;
}

StepType backward_of(StepType forward) {
  for (const auto& [fwd, bwd] : kBackwardOf)
    if (forward == fwd) return bwd;
  throw Error(ErrorKind::kInternal, "backward_of: " + std::string(step_type_name(forward)) +
                                        " is not a forward step type");
}

StepType forward_shape(StepType step) {
  for (const auto& [fwd, bwd] : kBackwardOf)
    if (step == bwd) return fwd;
  return step;
}

std::string_view step_type_name(StepType step) {
  return enum_name<StepType>(kStepTypeNames, step, "step_type_name");
}

StepType parse_step_type(std::string_view name) {
  return parse_enum<StepType>(kStepTypeNames, name, "step type");
}

int64_t WorkloadKey::seq_bucket() const {
  int64_t bucket = 1;
  while (bucket < q_len && bucket <= (int64_t{1} << 61)) bucket *= 2;  // never past 2^62, whatever q_len says
  return bucket;
}

std::string WorkloadMask::name() const {
  std::string out;
  auto add = [&](const std::string& token) { out += (out.empty() ? "" : " ") + token; };
  if (window_left >= 0 || window_right >= 0) add("window=" + std::to_string(window_left) + "," + std::to_string(window_right));
  if (document_len > 0) add("doc-len=" + std::to_string(document_len));
  if (softcap) add("softcap");
  return out;
}

WorkloadMask parse_workload_mask(std::string_view text) {
  WorkloadMask m;
  auto bad = [&](std::string_view token) {
    throw_bad_input("workload mask token '" + std::string(token) + "' in '" + std::string(text) +
                    "' is not one of window=L,R (each -1 or more), doc-len=D (a power of two), softcap");
  };
  auto number = [&](std::string_view digits, std::string_view token) {
    int64_t value = 0;
    size_t used = 0;
    try {
      value = std::stoll(std::string(digits), &used);
    } catch (const std::exception&) {
      bad(token);
    }
    if (used != digits.size() || digits.empty()) bad(token);
    return value;
  };
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view token = text.substr(at, end - at);
    at = end + 1;
    if (token == "softcap") {
      m.softcap = true;
    } else if (token.starts_with("window=")) {
      const std::string_view sides = token.substr(7);
      const size_t comma = sides.find(',');
      if (comma == std::string_view::npos) bad(token);
      m.window_left = number(sides.substr(0, comma), token);
      m.window_right = number(sides.substr(comma + 1), token);
      if (m.window_left < -1 || m.window_right < -1 || (m.window_left < 0 && m.window_right < 0)) bad(token);
    } else if (token.starts_with("doc-len=")) {
      m.document_len = number(token.substr(8), token);
      if (m.document_len <= 0 || (m.document_len & (m.document_len - 1)) != 0) bad(token);
    } else {
      bad(token);
    }
  }
  // Canonical text only: another order or spacing would give the same mask two names.
  if (m.name() != text) throw_bad_input("workload mask '" + std::string(text) + "' is not in canonical form '" + m.name() + "'");
  return m;
}

WorkloadMask workload_mask_of(const Problem& p) {
  WorkloadMask m;
  m.window_left = p.window_left;
  // A causal problem's right side is moot (kernel_needs_key_intervals): -1, so that (L, 0), (L, -1)
  // and (L, 4096) under causal are one workload, and the flags stay kernel_support.h's, which the
  // runtime follows when it passes interval tables.
  m.window_right = p.causal ? -1 : p.window_right;
  int64_t documents = 0, tokens = 0;
  for (int64_t length : p.documents)
    if (length > 0) ++documents, tokens += length;
  if (p.documents.size() > 1) {
    // Mean non-empty length, rounded up to a power of two (at least 1).
    const int64_t mean = documents > 0 ? (tokens + documents - 1) / documents : 1;
    m.document_len = 1;
    while (m.document_len < mean) m.document_len *= 2;
  }
  m.softcap = p.softcap > 0;
  return m;
}

std::string WorkloadKey::describe() const {
  return std::string(dtype_name(dtype)) + " hd" + std::to_string(head_dim) + " q" + std::to_string(q_heads) + "/kv" +
         std::to_string(kv_heads) + (causal ? " causal" : " full-mask") + " b" + std::to_string(batch) + " " +
         std::string(scheme_name(scheme)) + " " + std::string(step_type_name(step)) + " q" + std::to_string(q_len) +
         " kv" + std::to_string(kv_len) + (mask.any() ? " mask " + mask.name() : std::string()) + " on " + gpu_name + " (" + arch + ", " + std::to_string(sm_count) + " SMs)";
}

nlohmann::json WorkloadKey::to_json() const {
  nlohmann::json j = {{"dtype", dtype_name(dtype)}, {"head_dim", head_dim}, {"q_heads", q_heads},
          {"kv_heads", kv_heads},       {"causal", causal},     {"batch", batch},
          {"q_len", q_len},             {"kv_len", kv_len},     {"scheme", scheme_name(scheme)},
          {"step_type", step_type_name(step)}, {"gpu_name", gpu_name}, {"arch", arch},
          {"sm_count", sm_count}};
  if (mask.any()) {
    j["window_left"] = mask.window_left;
    j["window_right"] = mask.window_right;
    j["document_len"] = mask.document_len;
    j["softcap"] = mask.softcap;
  }
  return j;
}

WorkloadKey WorkloadKey::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw_bad_input("workload must be a JSON object");
  WorkloadKey w;
  w.dtype = parse_dtype(field<std::string>(j, "dtype"));
  w.head_dim = field<int>(j, "head_dim");
  w.q_heads = field<int>(j, "q_heads");
  w.kv_heads = field<int>(j, "kv_heads");
  w.causal = field<bool>(j, "causal");
  w.batch = field<int>(j, "batch");
  w.q_len = field<int64_t>(j, "q_len");
  w.kv_len = field<int64_t>(j, "kv_len");
  w.scheme = parse_scheme(field<std::string>(j, "scheme"));
  w.step = parse_step_type(field<std::string>(j, "step_type"));
  w.gpu_name = field<std::string>(j, "gpu_name");
  w.arch = field<std::string>(j, "arch");
  w.sm_count = field<int>(j, "sm_count");
  if (w.sm_count < 0) throw_bad_input("workload sm_count " + std::to_string(w.sm_count) + " is negative; allowed: 0 or more");
  // Mask fields are optional: a record written before masks existed is unmasked.
  if (j.contains("window_left")) w.mask.window_left = field<int64_t>(j, "window_left");
  if (j.contains("window_right")) w.mask.window_right = field<int64_t>(j, "window_right");
  if (j.contains("document_len")) w.mask.document_len = field<int64_t>(j, "document_len");
  if (j.contains("softcap")) w.mask.softcap = field<bool>(j, "softcap");
  if (w.mask.window_left < -1 || w.mask.window_right < -1 || w.mask.document_len < 0) {
    throw_bad_input("workload window_left " + std::to_string(w.mask.window_left) + ", window_right " +
                    std::to_string(w.mask.window_right) + " or document_len " + std::to_string(w.mask.document_len) +
                    " is out of range (window sides -1 or more, document_len 0 or a power of two)");
  }
  // The same rules as the canonical text (a window side >= -1, a power-of-two document length).
  if (w.mask.any()) w.mask = parse_workload_mask(w.mask.name());
  if (w.kv_heads <= 0 || w.q_heads % w.kv_heads != 0) {
    throw_bad_input("workload q_heads " + std::to_string(w.q_heads) + " is not a multiple of kv_heads " + std::to_string(w.kv_heads));
  }
  return w;
}

std::vector<StepType> step_types_for(const Problem& p) {
  if (!p.causal) return {StepType::kFull};
  if (p.cp_size == 1) return {StepType::kDiagonal};
  switch (p.scheme) {
    case Scheme::kContiguous: return {StepType::kDiagonal, StepType::kFull};
    case Scheme::kZigzag: return {StepType::kDiagonal, StepType::kZigzagKvHalf, StepType::kZigzagQHalf};
    case Scheme::kZigzagToken:
    case Scheme::kStriped: return {StepType::kDiagonal};
  }
  throw Error(ErrorKind::kInternal, "step_types_for: unknown scheme value");
}

std::vector<StepType> backward_step_types_for(const Problem& p) {
  std::vector<StepType> steps = step_types_for(p);
  for (StepType& s : steps) s = backward_of(s);
  return steps;
}

StepType step_type_at(const Problem& p, int rank, int step) {
  if (!p.causal) return StepType::kFull;
  if (step == 0) return StepType::kDiagonal;
  const int source = kv_source_rank(rank, step, static_cast<int>(p.cp_size));
  switch (p.scheme) {
    case Scheme::kContiguous: return StepType::kFull;  // source > rank is skipped entirely
    case Scheme::kZigzag: return source < rank ? StepType::kZigzagKvHalf : StepType::kZigzagQHalf;
    case Scheme::kZigzagToken:
    case Scheme::kStriped: return StepType::kDiagonal;
  }
  throw Error(ErrorKind::kInternal, "step_type_at: unknown scheme value");
}

WorkloadKey workload_for(const Problem& p, StepType step, const DeviceClass& device) {
  WorkloadKey w;
  w.dtype = p.dtype;
  w.head_dim = static_cast<int>(p.head_dim);
  w.q_heads = static_cast<int>(p.q_heads);
  w.kv_heads = static_cast<int>(p.kv_heads);
  w.causal = p.causal;
  w.batch = static_cast<int>(p.batch);
  w.scheme = p.scheme;
  w.step = step;
  // The largest rank's rows: where lengths do not divide, ranks differ, and the floor of seq_len /
  // cp_size keyed a 4097-token, 4-rank step as 1024 rows (its largest rank holds 1025) and a
  // 3-token one over 4 ranks as 0. A zigzag half step covers one chunk of it where the ring
  // launches it so (zigzag_steps_run_halves: not with documents, whose steps run at full size; they
  // were keyed, tuned and selected at half size all the same).
  const std::vector<int64_t> rows = partition_rows_all(p.scheme, p.seq_len, static_cast<int>(p.cp_size), p.documents);
  const int64_t local = *std::max_element(rows.begin(), rows.end());
  const StepType shape = zigzag_steps_run_halves(p) ? forward_shape(step) : StepType::kFull;
  w.q_len = shape == StepType::kZigzagQHalf ? (local + 1) / 2 : local;
  w.kv_len = shape == StepType::kZigzagKvHalf ? (local + 1) / 2 : local;
  w.gpu_name = device.gpu_name;
  w.arch = device.arch;
  w.sm_count = device.sm_count;
  w.mask = workload_mask_of(p);
  return w;
}

std::vector<WorkloadKey> workloads_for(const Problem& p, const DeviceClass& device) {
  // A workload is a step of the generated kernels; a problem they cannot run has none.
  check_kernel_ring_problem(p);
  std::vector<WorkloadKey> out;
  for (StepType step : step_types_for(p)) out.push_back(workload_for(p, step, device));
  return out;
}

}  // namespace cpgen
