// Integers read from JSON files (caches, records): only a JSON integer that the target type holds
// exactly is taken, so 4294967424 is not read as 128 (an int's wrap), 128.9 not as 128 and 1e300
// not as INT64_MIN, as nlohmann's get<int>() would.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

namespace cpgen {

template <typename T>
std::optional<T> exact_integer(const nlohmann::json& value) {
  static_assert(std::is_integral_v<T> && std::is_signed_v<T>);
  if (!value.is_number_integer()) return std::nullopt;
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
    return static_cast<T>(u);
  }
  const int64_t x = value.get<int64_t>();
  if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max()) return std::nullopt;
  return static_cast<T>(x);
}

// What an integer field allows, for messages: "an integer in [-2147483648, 2147483647]".
template <typename T>
std::string integer_range_text() {
  return "an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
         std::to_string(std::numeric_limits<T>::max()) + "]";
}

}  // namespace cpgen
