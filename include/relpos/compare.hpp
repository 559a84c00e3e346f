#pragma once
// How results are compared with the CPU reference, by the tests and by `relpos check` alike.
#include <cstdint>
#include <span>

namespace relpos {

// max |got - want| / max(1, max |want|); infinity when sizes differ or a value is NaN where the
// reference is not. Matching infinities (masked entries) count as equal.
double normalised_error(std::span<const float> got, std::span<const float> want);

// Number of positions where the integers differ (sizes must match, else the larger size).
std::uint64_t count_mismatches(std::span<const std::int32_t> got, std::span<const std::int32_t> want);

}  // namespace relpos
