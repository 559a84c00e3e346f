// How RoPE's invocations share rows (src/ops/rope_invocations.hpp), checked for shapes far too large to
// run: no invocation's loops go past RELPOS_MAX_LOOP_ITERATIONS.
#include <gtest/gtest.h>

#include <cstdint>

#include "ops/rope_invocations.hpp"

using namespace relpos::detail;

TEST(RopeInvocations, InvocationsStayUnderTheLoopBound) {
  for (std::uint64_t units : {1u, 4u, 16u, 64u})
    for (std::uint64_t p_count : {1ull, 7ull, 8192ull, 100000ull, 1ull << 32})
      for (std::uint64_t l_count : {1ull, 5ull, 32768ull, 40000ull, 1ull << 20, 0xffffffffull})
        for (std::uint64_t row_iterations : {1ull, 2ull, 33ull, 502ull, 32767ull, 32768ull}) {
          const std::uint64_t l_per = rope_l_per_invocation(units, p_count, l_count, row_iterations);
          SCOPED_TRACE(testing::Message() << "units " << units << " p " << p_count << " l " << l_count << " row " << row_iterations);
          ASSERT_GE(l_per, 1u);
          ASSERT_LE(l_per * row_iterations, RELPOS_MAX_LOOP_ITERATIONS);
          // Few invocations still spread the rows over about the target number of them.
          if (l_count <= kRopeTargetInvocations / (units * p_count)) ASSERT_EQ(l_per, 1u);
        }
}

TEST(RopeInvocations, RowIterationsCountEveryLoop) {
  EXPECT_EQ(rope_row_iterations(true, false, 64, 128), 1u);  // four-pair units: the loop over rows only
  EXPECT_EQ(rope_row_iterations(false, true, 6, 10), 1u + 3u);
  EXPECT_EQ(rope_row_iterations(false, false, 6, 10), 1u + 3u + 4u);
  EXPECT_EQ(rope_row_iterations(false, false, 6, 6), 1u + 3u + 1u);  // the empty tail loop still runs once
}
