// The Dtype of a template's 16-bit element type (device::Bf16 or device::Fp16), for the emulated
// template tests' conversions and error limits. Include it after the templates (cpgen/traits.cuh).
#pragma once

#include <type_traits>

#include "cpgen/types.h"

namespace cpgen::testing {

template <typename Element>
constexpr Dtype element_dtype() {
  static_assert(std::is_same_v<Element, device::Bf16> || std::is_same_v<Element, device::Fp16>, "bf16 or fp16");
  return std::is_same_v<Element, device::Bf16> ? Dtype::kBf16 : Dtype::kFp16;
}

}  // namespace cpgen::testing
