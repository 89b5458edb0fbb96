// Floats as their bit patterns, for tests that tell -0.0f from +0.0f or hold an instruction to a
// bound in ulps (counted as representable floats, which for floats of one sign are ordered as
// their bits).
#pragma once

#include <cstdint>
#include <cstring>

namespace cpgen::testing {

inline uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// How many floats b lies above a (negative: below); both finite and of one sign.
inline int64_t floats_between(float a, float b) {
  return static_cast<int64_t>(bits(b)) - static_cast<int64_t>(bits(a));
}

}  // namespace cpgen::testing
