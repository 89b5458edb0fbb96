#include "tools/cli/shape_options.h"

#include "cpgen/error.h"
#include "runtime/ring/shapes.h"

namespace cpgen::cli {

std::vector<Problem> problems_of_options(const std::string& shape, const std::string& shapes_file,
                                         const std::string& command) {
  if (shape.empty() == shapes_file.empty())
    throw_bad_input(command + ": give exactly one of --shape JSON or --shapes FILE");
  if (shapes_file.empty()) return {parse_shape_json(shape, "--shape")};
  return load_shapes_file(shapes_file);
}

}  // namespace cpgen::cli
