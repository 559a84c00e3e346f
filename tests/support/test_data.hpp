#pragma once
// Reading the test vectors under tests/data and making random inputs.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace relpos::test {

std::string data_path(const std::string& name);
// The non-empty, non-comment lines of a data file, split on whitespace.
std::vector<std::vector<std::string>> data_lines(const std::string& name);

std::vector<float> random_floats(std::mt19937& rng, std::size_t n, float lo = -2.0f, float hi = 2.0f);
// A query offset of each kind a per-distance bias must get right, equally likely: first-aligned
// (0), last-aligned (keys - queries), far (within +-far) and near (within +-near).
std::int64_t random_query_offset(std::mt19937& rng, std::uint32_t queries, std::uint32_t keys, std::int64_t far, std::int64_t near);

}  // namespace relpos::test
