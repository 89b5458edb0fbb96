// Compiler logs are read line by line (compile_log.cpp, ptxas_log.cpp).
#pragma once

#include <string_view>
#include <vector>

namespace cpgen {

// The lines of `text` without their '\n'; a final '\n' ends the last line rather than starting an
// empty one. The views point into `text`.
inline std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace cpgen
