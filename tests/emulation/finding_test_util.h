// Helpers shared by the emulator's tests: the launch's global buffers and the check that a launch
// ended in a sanitizer finding that names what it must.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "emulation/cuda_emulation.h"

namespace cpgen::testing {

// Registers the launch's global buffers for one test and clears them afterwards (they are per host
// thread and would otherwise reach the next test's launches).
class LaunchBuffers {
 public:
  explicit LaunchBuffers(std::vector<emulation::GlobalBuffer> buffers) : buffers_(std::move(buffers)) {
    emulation::set_global_buffers(buffers_.data(), static_cast<int>(buffers_.size()));
  }
  ~LaunchBuffers() { emulation::set_global_buffers(nullptr, 0); }

 private:
  std::vector<emulation::GlobalBuffer> buffers_;
};

// One poisoned launch buffer per vector, over all of its data, in the order given
// (GlobalBuffer::poisoned: a word still all ones reads as never written).
template <typename... Vectors>
std::vector<emulation::GlobalBuffer> poisoned_buffers(const Vectors&... vectors) {
  return {emulation::GlobalBuffer{vectors.data(), vectors.size() * sizeof(*vectors.data()), nullptr, true}...};
}

// `error` (what emulation::launch returned) is a sanitizer finding that holds every one of `parts`.
inline void expect_finding(const std::string& error, const std::vector<std::string>& parts) {
  EXPECT_EQ(error.rfind("sanitizer: ", 0), 0u) << error;
  for (const std::string& part : parts)
    EXPECT_NE(error.find(part), std::string::npos) << "want '" << part << "' in: " << error;
}

}  // namespace cpgen::testing
