// The database schema as an ordered list of migrations: migration i (0-based) moves a file from
// schema version i to i + 1. A new schema appends a migration; old ones never change, so every
// file ever written can be brought up to date. tests/cache/schema_golden_test.cpp pins the result.
#pragma once

#include <string_view>
#include <vector>

namespace cpgen {

const std::vector<std::string_view>& schema_migrations();

}  // namespace cpgen
