// Summaries of timing samples, one definition for the tuner's records, its race and its tests.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

namespace cpgen {

// Median and interquartile range of `samples` (a sorted copy, linear interpolation between
// neighbours: the median of an even count is the mean of the middle two). Zeros for none.
inline std::pair<double, double> median_and_iqr(std::vector<double> samples) {
  if (samples.empty()) return {0, 0};
  std::sort(samples.begin(), samples.end());
  auto quantile = [&](double q) {
    const double pos = q * static_cast<double>(samples.size() - 1);
    const size_t lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, samples.size() - 1);
    return samples[lo] + (pos - static_cast<double>(lo)) * (samples[hi] - samples[lo]);
  };
  return {quantile(0.5), quantile(0.75) - quantile(0.25)};
}

inline double median_of(std::vector<double> samples) { return median_and_iqr(std::move(samples)).first; }

}  // namespace cpgen
