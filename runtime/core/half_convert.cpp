#include "runtime/core/half_convert.h"

#include <cmath>

namespace cpgen {

uint16_t float_to_fp16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504: inf
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): value = m * 2^-24 with m rounded to nearest even.
    float magnitude;
    std::memcpy(&magnitude, &abs, 4);
    const float scaled = magnitude * 16777216.0f;  // 2^24, exact
    const auto m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  uint32_t half = ((abs - 0x38000000u) >> 13);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float fp16_to_float(uint16_t value) {
  const uint32_t sign = (value & 0x8000u) << 16;
  const uint32_t exponent = (value >> 10) & 0x1fu;
  const uint32_t mantissa = value & 0x3ffu;
  float out;
  if (exponent == 0) {
    out = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -out : out;
  }
  uint32_t bits;
  if (exponent == 31)
    bits = sign | 0x7f800000u | (mantissa << 13);
  else
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  std::memcpy(&out, &bits, 4);
  return out;
}

std::vector<uint16_t> to_half(const std::vector<float>& values, Dtype dtype) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    out[i] = dtype == Dtype::kBf16 ? float_to_bf16(values[i]) : float_to_fp16(values[i]);
  return out;
}

std::vector<float> from_half(const std::vector<uint16_t>& values, Dtype dtype) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    out[i] = dtype == Dtype::kBf16 ? bf16_to_float(values[i]) : fp16_to_float(values[i]);
  return out;
}

}  // namespace cpgen
