// One table per enum gives both directions of its spelling: value -> name and name -> value,
// with the "allowed:" list of an error message derived from the same table, so the three never
// drift apart.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "cpgen/error.h"

namespace cpgen {

template <typename Enum>
using EnumNames = std::span<const std::pair<Enum, std::string_view>>;

// The name of `value`; an unlisted value is a bug in cpgen (kInternal naming `what`).
template <typename Enum>
std::string_view enum_name(EnumNames<Enum> names, Enum value, std::string_view what) {
  for (const auto& [v, name] : names)
    if (v == value) return name;
  throw Error(ErrorKind::kInternal, std::string(what) + ": unknown value " +
                                        std::to_string(static_cast<int>(value)));
}

// The value spelled `name`; otherwise kBadInput: "<what> '<name>' is not supported; allowed: ...".
template <typename Enum>
Enum parse_enum(EnumNames<Enum> names, std::string_view name, std::string_view what) {
  std::string allowed;
  for (const auto& [v, spelled] : names) {
    if (spelled == name) return v;
    allowed += (allowed.empty() ? "" : ", ") + std::string(spelled);
  }
  throw_bad_input(std::string(what) + " '" + std::string(name) + "' is not supported; allowed: " + allowed);
}

}  // namespace cpgen
