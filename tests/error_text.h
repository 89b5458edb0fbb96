// The text of the cpgen::Error a call throws, for tests of one-line messages: a call that throws
// none, or another kind than expected, fails the test.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "cpgen/error.h"

namespace cpgen::testing {

inline std::string error_text(const std::function<void()>& f, ErrorKind kind = ErrorKind::kBadInput) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace cpgen::testing
