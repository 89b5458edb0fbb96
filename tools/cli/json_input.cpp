#include "tools/cli/json_input.h"

#include "cpgen/error.h"
#include "runtime/core/text_file.h"
#include "runtime/core/text_position.h"

namespace cpgen::cli {
namespace {

// nlohmann's text is "[json.exception.parse_error.101] parse error at line 2, column 0: syntax
// error while parsing ...; last read: '...'": keep the reason, and drop the "last read" part,
// which shows the parser's buffer (with markers such as <U+000A>) rather than the file.
std::string reason_of(const std::string& what) {
  std::string reason = what;
  if (size_t close = reason.find("] "); reason.rfind("[json.exception.", 0) == 0 && close != std::string::npos) {
    reason = reason.substr(close + 2);
  }
  if (size_t column = reason.find("column "); column != std::string::npos) {
    if (size_t colon = reason.find(": ", column); colon != std::string::npos) reason = reason.substr(colon + 2);
  }
  if (size_t last = reason.find("; last read"); last != std::string::npos) reason = reason.substr(0, last);
  for (char& c : reason) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return reason;
}

}  // namespace

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  const std::string label = what + ": " + path;
  const std::string text = read_text_file(path, label, "a JSON file", kMaxJsonFileBytes);
  refuse_nul_byte(text, label, "a JSON file");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    const size_t offset = e.byte == 0 ? 0 : e.byte - 1;
    const bool at_end = offset >= text.size();
    throw_bad_input(label + ": not valid JSON at " + line_column(text, offset) +
                    (at_end ? " (the file ends early; is it truncated?)" : "") + ": " + reason_of(e.what()));
  } catch (const nlohmann::json::exception& e) {
    throw_bad_input(label + ": not valid JSON: " + reason_of(e.what()));
  }
}

}  // namespace cpgen::cli
