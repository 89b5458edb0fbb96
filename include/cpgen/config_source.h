// Where a kernel's tile config came from, in the order the run-time lookup tries the sources
// (cache/lookup.h; `cpgen explain` and RingAttention report the same values).
#pragma once

#include <string_view>

namespace cpgen {

enum class ConfigSource {
  kDatabaseExact,    // "database-exact": tuned for this exact workload in the user's database
  kDatabaseBucket,   // "database-bucket": tuned at the nearest sequence bucket
  kPretunedExact,    // "pretuned-exact": a shipped cache measured this exact workload
  kPretunedBucket,   // "pretuned-bucket": a shipped cache, nearest bucket
  kPretunedPattern,  // "pretuned-pattern": a shipped cache entry naming some workload fields
  kDefault,          // "default": KernelSpec::default_for
};

// The name above; throws Error(kInternal) for a value outside the enum.
std::string_view config_source_name(ConfigSource source);

}  // namespace cpgen
