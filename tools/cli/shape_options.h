// The problems of a command that takes one shape inline or a shapes file (explain, plan).
#pragma once

#include <string>
#include <vector>

#include "cpgen/problem.h"

namespace cpgen::cli {

// Throws Error(kBadInput) "<command>: give exactly one of --shape JSON or --shapes FILE" unless
// exactly one is given; then the --shape entry (runtime/ring/shapes.h, parse_shape_json) or the
// file's shapes (load_shapes_file).
std::vector<Problem> problems_of_options(const std::string& shape, const std::string& shapes_file,
                                         const std::string& command);

}  // namespace cpgen::cli
