#pragma once
// How rope.comp's invocations share the rows of a dispatch: each takes one unit at one p and loops
// over a block of l (relpos_push/rope.h), and its loops together stay under the one bound on
// shader loops (relpos_push/loop_bound.h). Header-only and Vulkan-free, so that tests can check
// the plan for shapes far too large to run.
#include <algorithm>
#include <cstdint>

#include "relpos_push/loop_bound.h"

namespace relpos::detail {

// Enough invocations to keep lavapipe's threads and SIMD lanes busy; beyond that, each loops over
// more rows so that its sin and cos serve more of them.
constexpr std::uint64_t kRopeTargetInvocations = 8192;

// Loop iterations an invocation spends per row: one of the loop over l, plus on the element-wise
// path (quad false) one per pair and, out of place, one per pass-through feature (at least one:
// lavapipe runs a loop's body once even when no lane enters it).
inline std::uint64_t rope_row_iterations(bool quad, bool in_place, std::uint32_t rot_dim, std::uint32_t head_dim) {
  if (quad) return 1;
  return 1 + std::uint64_t{rot_dim / 2} + (in_place ? 0 : std::max<std::uint64_t>(1, head_dim - rot_dim));
}

// Rows (l) per invocation for a grid of units x p_count x l_count: as many as spread the work over
// about kRopeTargetInvocations invocations, and no more than keep the invocation's loop
// iterations within RELPOS_MAX_LOOP_ITERATIONS (row_iterations must not exceed it).
inline std::uint64_t rope_l_per_invocation(std::uint64_t units, std::uint64_t p_count, std::uint64_t l_count,
                                           std::uint64_t row_iterations) {
  const std::uint64_t blocks = std::clamp<std::uint64_t>(kRopeTargetInvocations / (units * p_count), 1, l_count);
  const std::uint64_t l_per = (l_count + blocks - 1) / blocks;
  return std::min(l_per, RELPOS_MAX_LOOP_ITERATIONS / row_iterations);
}

}  // namespace relpos::detail
