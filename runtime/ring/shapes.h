// Shapes files: the list of attention problems a user wants tuned or planned.
//
//   {"shapes": [{"name": "llama3-8b-128k-cp8", "batch": 1, "q_heads": 32, "kv_heads": 8,
//                "head_dim": 128, "seq_len": 131072, "cp_size": 8, "dtype": "bf16",
//                "causal": true, "scheme": "zigzag"}]}
//
// The top level is an object with exactly one key, "shapes", a non-empty array of objects.
// Fields of one shape (anything else is an error):
//   required  q_heads   integer 1..1024 (kMaxHeads)
//             kv_heads  integer 1..1024; divides q_heads; q_heads / kv_heads is a GQA group the
//                       kernels support (kSupportedGqaGroups in generator/kernel_spec.h)
//             head_dim  integer, one of kSupportedHeadDims
//             seq_len   integer 1..2^30 (kMaxSeqLen, the runtime's limit), the whole sequence
//                       over all ranks; the scheme must be able to split it over cp_size ranks
//                       (check_partitionable)
//             cp_size   integer 1..1024 (kMaxCpSize)
//             dtype     "bf16" or "fp16"
//             causal    true or false
//   optional  name           1..100 printable ASCII characters, unique in the file; default "shape[i]"
//             batch          integer 1..65536; default 1
//             scheme         "contiguous", "zigzag", "zigzag-token", "striped";
//                            default "zigzag" when causal, "contiguous" otherwise
//             softmax_scale  number > 0; default 1/sqrt(head_dim)
// Integers must be written as JSON integers: 2.0, 2e3 and "2" are rejected, so that a value is
// never silently truncated or reinterpreted. batch * q_heads * seq_len * head_dim must stay at
// most 2^48 elements, which keeps every byte count derived from a problem inside int64.
//
// Every defect throws Error(kBadInput) with one line: the source, the shape (by index and name),
// the field, and what is allowed. No input makes the parser crash or run away: the file size and
// nesting depth are bounded, and numbers are range-checked before they are converted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cpgen/problem.h"
#include "runtime/core/problem_limits.h"

namespace cpgen {

inline constexpr size_t kMaxShapesFileBytes = size_t{16} << 20;
// The problem's own limits (cpgen/problem.h): a shapes file admits exactly what the runtime runs.
inline constexpr int64_t kMaxShapeBatch = kMaxBatch;
inline constexpr int64_t kMaxShapeHeads = kMaxHeads;
inline constexpr int64_t kMaxShapeSeqLen = kMaxSeqLen;
inline constexpr int64_t kMaxShapeCpSize = kMaxCpSize;
inline constexpr size_t kMaxShapeNameLength = 100;

// source_name is what messages call the text (a path, or e.g. "<inline>").
std::vector<Problem> parse_shapes_json(const std::string& text, const std::string& source_name);
// One shape object written on its own (e.g. `cpgen explain --shape '{...}'`), with the same
// checks as a file's entries; messages quote and locate only `text`.
Problem parse_shape_json(const std::string& text, const std::string& source_name);
// Reads the file (a missing or unreadable file is bad input too) and parses it.
std::vector<Problem> load_shapes_file(const std::string& path);

// The checks that do not depend on JSON, for problems built in code: head dim, GQA group,
// ranges, element count and partitionability. `where` prefixes the message (e.g. the shape).
void validate_problem(const Problem& problem, const std::string& where);

}  // namespace cpgen
