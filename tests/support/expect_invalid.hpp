#pragma once
// Asserts that f throws relpos::InvalidArgument whose message names `word`.
#include <gtest/gtest.h>

#include <relpos/error.hpp>

#include <string>

namespace relpos::test {

template <class F>
void expect_invalid(F&& f, const std::string& word) {
  try {
    f();
    ADD_FAILURE() << "expected InvalidArgument mentioning " << word;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

}  // namespace relpos::test
