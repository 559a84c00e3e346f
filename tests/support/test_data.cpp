#include "support/test_data.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace relpos::test {

std::string data_path(const std::string& name) { return std::string(RELPOS_TEST_DATA) + "/" + name; }

std::vector<std::vector<std::string>> data_lines(const std::string& name) {
  std::ifstream f(data_path(name));
  if (!f) throw std::runtime_error("cannot open test data " + data_path(name));
  std::vector<std::vector<std::string>> out;
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    if (!words.empty()) out.push_back(std::move(words));
  }
  return out;
}

std::vector<float> random_floats(std::mt19937& rng, std::size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::int64_t random_query_offset(std::mt19937& rng, std::uint32_t queries, std::uint32_t keys, std::int64_t far, std::int64_t near) {
  switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
    case 0: return 0;
    case 1: return std::int64_t{keys} - queries;
    case 2: return std::uniform_int_distribution<std::int64_t>(-far, far)(rng);
    default: return std::uniform_int_distribution<std::int64_t>(-near, near)(rng);
  }
}

}  // namespace relpos::test
