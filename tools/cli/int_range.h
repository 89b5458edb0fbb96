// CLI11 validators for integer options that checks the text before CLI11 converts it, so that a
// value beyond the option's type (--ranks 99999999999) and one outside the allowed range (--jobs
// -2) both give one line naming the option and the range, e.g.
//   cpgen: --jobs: must be an integer 0..1024 (0: one per CPU), got -2 (see cpgen --help)
#pragma once

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace cpgen::cli {

inline CLI::Validator int_range(int64_t lo, int64_t hi, const std::string& note = "") {
  const std::string allowed = "an integer " + std::to_string(lo) + ".." + std::to_string(hi) + note;
  return CLI::Validator(
      [lo, hi, allowed](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long value = std::strtoll(text.c_str(), &end, 10);
        const bool whole = !text.empty() && end && *end == '\0';
        if (!whole || errno == ERANGE || value < lo || value > hi) {
          return "must be " + allowed + ", got " + (text.size() > 40 ? text.substr(0, 40) + "..." : text);
        }
        return std::string();
      },
      allowed);
}

// The same for a real-valued option: the whole text a finite number (no empty value, which CLI11
// reads as 0, no "nan"), at least `lo` (with `strict`, above it).
inline CLI::Validator number_at_least(double lo, const std::string& note = "", bool strict = false) {
  const std::string allowed = std::string("a finite number ") + (strict ? "> " : ">= ") + CLI::detail::to_string(lo) + note;
  return CLI::Validator(
      [lo, strict, allowed](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        const bool whole = !text.empty() && end && *end == '\0';
        if (!whole || errno == ERANGE || !std::isfinite(value) || value < lo || (strict && value == lo)) {
          return "must be " + allowed + ", got '" + (text.size() > 40 ? text.substr(0, 40) + "..." : text) + "'";
        }
        return std::string();
      },
      allowed);
}

}  // namespace cpgen::cli
