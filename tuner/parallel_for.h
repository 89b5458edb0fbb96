// Splits [0, n) into one contiguous range per hardware thread and runs body(begin, end) on each;
// the host-side checks of the timing harness (tens of millions of elements per candidate) would
// otherwise dominate a tune.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace cpgen {

inline void parallel_ranges(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(1, n));
  const int64_t chunk = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t begin = t * chunk, end = std::min(n, begin + chunk);
    if (begin < end) pool.emplace_back(body, begin, end);
  }
  body(0, std::min(n, chunk));
  for (std::thread& th : pool) th.join();
}

}  // namespace cpgen
