#include "runtime/jit/ptxas_log.h"

#include <cstdlib>
#include <string>

#include "runtime/core/log_lines.h"

namespace cpgen {
namespace {

// The number immediately before `unit` in `line` ("256 bytes stack frame" -> 256), or -1.
long number_before(std::string_view line, std::string_view unit) {
  size_t at = line.find(unit);
  if (at == std::string_view::npos || at == 0) return -1;
  size_t end = at;
  while (end > 0 && line[end - 1] == ' ') --end;
  size_t begin = end;
  while (begin > 0 && line[begin - 1] >= '0' && line[begin - 1] <= '9') --begin;
  if (begin == end) return -1;
  return std::strtol(std::string(line.substr(begin, end - begin)).c_str(), nullptr, 10);
}

// The text between the first pair of single quotes after `marker`, or the rest of the line.
std::string name_after(std::string_view line, std::string_view marker) {
  size_t at = line.find(marker);
  std::string_view rest = line.substr(at + marker.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  if (!rest.empty() && rest.front() == '\'') {
    size_t close = rest.find('\'', 1);
    return std::string(rest.substr(1, close == std::string_view::npos ? close : close - 1));
  }
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\r')) rest.remove_suffix(1);
  return std::string(rest);
}

void set_if_found(int& field, long value) {
  if (value >= 0) field = static_cast<int>(value);
}

}  // namespace

std::map<std::string, FunctionResources> parse_ptxas_log(std::string_view log) {
  std::map<std::string, FunctionResources> functions;
  std::string compiling;   // entry function whose "Used ..." line comes next
  std::string properties;  // function whose stack/spill line comes next
  for (std::string_view line : split_lines(log)) {
    if (line.rfind("ptxas", 0) != 0) continue;  // compiler diagnostics, not ptxas resources

    static constexpr std::string_view kCompiling = "Compiling entry function";
    static constexpr std::string_view kProperties = "Function properties for";
    if (line.find(kCompiling) != std::string_view::npos) {
      compiling = name_after(line, kCompiling);
      functions[compiling].is_entry = true;
    } else if (line.find(kProperties) != std::string_view::npos) {
      properties = name_after(line, kProperties);
      functions[properties];
    } else if (line.find("bytes stack frame") != std::string_view::npos && !properties.empty()) {
      FunctionResources& f = functions[properties];
      set_if_found(f.stack_frame_bytes, number_before(line, "bytes stack frame"));
      set_if_found(f.spill_store_bytes, number_before(line, "bytes spill stores"));
      set_if_found(f.spill_load_bytes, number_before(line, "bytes spill loads"));
      properties.clear();
    } else if (line.find("Used ") != std::string_view::npos &&
               line.find("registers") != std::string_view::npos && !compiling.empty()) {
      FunctionResources& f = functions[compiling];
      f.is_entry = true;
      set_if_found(f.registers, number_before(line, "registers"));
      set_if_found(f.shared_bytes, number_before(line, "bytes smem"));
      set_if_found(f.const_bytes, number_before(line, "bytes cmem[0]"));
      compiling.clear();
    }
  }
  return functions;
}

std::optional<KernelResources> kernel_resources(std::string_view log, std::string_view kernel) {
  auto functions = parse_ptxas_log(log);
  auto it = functions.find(std::string(kernel));
  if (it == functions.end() || !it->second.is_entry) return std::nullopt;
  KernelResources out;
  out.registers = it->second.registers;
  out.stack_bytes = it->second.stack_frame_bytes;
  out.shared_bytes = it->second.shared_bytes;
  for (const auto& [name, f] : functions) {
    if (name == it->first || !f.is_entry) out.spill_bytes += f.spill_store_bytes + f.spill_load_bytes;
  }
  return out;
}

}  // namespace cpgen
