#pragma once
// Assertions the operation tests share.
#include <gtest/gtest.h>

#include <relpos/error.hpp>

#include <string>

namespace relpos::test {

// f() must throw InvalidArgument whose message mentions `word` (the parameter it names).
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
