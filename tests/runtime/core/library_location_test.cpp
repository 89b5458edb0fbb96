// Where libcpgen was loaded from: the test binary links the build tree's library.
#include "runtime/core/library_location.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace cpgen {
namespace {

TEST(LibraryLocation, NamesTheBuildTreeLibrary) {
  const std::string lib = library_path();
  ASSERT_FALSE(lib.empty()) << "dladdr could not name libcpgen";
  EXPECT_TRUE(std::filesystem::path(lib).is_absolute()) << lib;
  EXPECT_NE(std::filesystem::path(lib).filename().string().find("libcpgen.so"), std::string::npos) << lib;
  EXPECT_TRUE(std::filesystem::equivalent(std::filesystem::path(lib).parent_path(), CPGEN_BINARY_DIR)) << lib;
  EXPECT_TRUE(running_from_build_tree());
}

}  // namespace
}  // namespace cpgen
