// Vocabulary shared by the whole project: element types and partition schemes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "cpgen/cxx_abi.h"

namespace cpgen {

enum class Dtype { kBf16, kFp16 };
// The ways of splitting a sequence over context-parallel ranks (docs/design.md, "The ring schedule").
enum class Scheme { kContiguous, kZigzag, kZigzagToken, kStriped };

std::string_view dtype_name(Dtype dtype);     // "bf16", "fp16"
Dtype parse_dtype(std::string_view name);     // throws kBadInput naming the allowed values
std::string_view scheme_name(Scheme scheme);  // "contiguous", "zigzag", "zigzag-token", "striped"
Scheme parse_scheme(std::string_view name);   // throws kBadInput naming the allowed values
inline constexpr int dtype_bytes(Dtype) { return 2; }

}  // namespace cpgen
