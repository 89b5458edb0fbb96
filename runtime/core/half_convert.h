// Host conversions between float and the kernels' 16-bit types (round to nearest even), for
// uploading test and benchmark inputs and reading results back.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpgen/types.h"

namespace cpgen {

// The spacing of the type's values at 1 (one unit in the last place there): 8 significant bits
// for bf16, 11 for fp16. Rounding to the type moves a value by at most half of it, relative.
inline double ulp_at_one(Dtype dtype) { return dtype == Dtype::kBf16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10); }

inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  // Round to nearest even on the 16 dropped bits.
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float bf16_to_float(uint16_t value) {
  uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t float_to_fp16(float value);
float fp16_to_float(uint16_t value);

std::vector<uint16_t> to_half(const std::vector<float>& values, Dtype dtype);
std::vector<float> from_half(const std::vector<uint16_t>& values, Dtype dtype);

}  // namespace cpgen
