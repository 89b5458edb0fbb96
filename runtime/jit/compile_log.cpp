#include "runtime/jit/compile_log.h"

#include "runtime/core/json_text.h"
#include "runtime/core/log_lines.h"

namespace cpgen {

std::optional<std::string> traits_assertion_failure(std::string_view log) {
  static constexpr std::string_view kTraits = "cpgen/traits.cuh(";
  static constexpr std::string_view kAssert = "): error: static assertion failed";
  static constexpr std::string_view kWith = " with \"";
  std::string messages;
  bool any_error = false;
  for (std::string_view line : split_lines(log)) {
    // Diagnostics read "<file>(<line>): error: ..."; the summary line "1 error detected in the
    // compilation of ..." and the source excerpts below each diagnostic are not errors themselves.
    const size_t at = line.find("): error: ");
    if (at == std::string_view::npos) continue;
    any_error = true;
    if (line.rfind(kTraits, 0) != 0 || line.find(kAssert) == std::string_view::npos) return std::nullopt;
    std::string message = "static assertion failed";
    if (size_t with = line.find(kWith); with != std::string_view::npos) {
      std::string_view text = line.substr(with + kWith.size());
      while (!text.empty() && (text.back() == '\r' || text.back() == ' ')) text.remove_suffix(1);
      if (!text.empty() && text.back() == '"') text.remove_suffix(1);
      message = std::string(text);
    }
    if (messages.find(message) == std::string::npos) messages += (messages.empty() ? "" : "; ") + message;
  }
  if (!any_error) return std::nullopt;
  return messages;
}

std::string log_summary(std::string_view log) {
  std::vector<std::string_view> lines;
  for (std::string_view line : split_lines(log))
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) lines.push_back(line);
  if (lines.empty()) return "the log is empty";
  size_t chosen = 0;
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find("error:") != std::string_view::npos) {  // "file(3): error: ...", "cc1plus: error: ..."
      chosen = i;
      break;
    }
  std::string_view line = lines[chosen];
  line.remove_prefix(line.find_first_not_of(" \t"));
  std::string text = printable(line, 300);
  if (lines.size() > 1) text += " (the log has " + std::to_string(lines.size() - 1) + " more lines)";
  return text;
}

}  // namespace cpgen
