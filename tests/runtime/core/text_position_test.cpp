// line_column (runtime/core/text_position.h): the place the bad-input messages of the shapes
// reader and the CLI's JSON reader name.
#include <gtest/gtest.h>

#include "runtime/core/text_position.h"

namespace cpgen {
namespace {

TEST(TextPosition, LinesAndColumnsCountFromOneAsAnEditorDoes) {
  const std::string text = "{\n  \"a\": 1,\n\n}";
  EXPECT_EQ(line_column(text, 0), "line 1, column 1");
  EXPECT_EQ(line_column(text, 1), "line 1, column 2") << "the first newline is the first line's last byte";
  EXPECT_EQ(line_column(text, 2), "line 2, column 1");
  EXPECT_EQ(line_column(text, 4), "line 2, column 3") << "the quote after two spaces";
  EXPECT_EQ(line_column(text, 12), "line 3, column 1") << "an empty line";
  EXPECT_EQ(line_column(text, 13), "line 4, column 1");
  EXPECT_EQ(line_column(text, 14), "line 4, column 2") << "the end";
  EXPECT_EQ(line_column(text, 1000), "line 4, column 2") << "past the end is the end";
  EXPECT_EQ(line_column("", 0), "line 1, column 1");
}

}  // namespace
}  // namespace cpgen
