// Where in a text file a byte is, for the one-line messages about bad input files (shapes files,
// the CLI's JSON inputs).
#pragma once

#include <algorithm>
#include <string>

namespace cpgen {

// "line L, column C" of byte `offset` of `text`, both 1-based, the way an editor counts them (a
// column is a byte); an offset past the end is the end.
inline std::string line_column(const std::string& text, size_t offset) {
  offset = std::min(offset, text.size());
  const size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<long>(offset), '\n'));
  const size_t line_start = offset == 0 ? std::string::npos : text.rfind('\n', offset - 1);
  const size_t column = line_start == std::string::npos ? offset + 1 : offset - line_start;
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

}  // namespace cpgen
