#pragma once
// tests/data/shaw_seed002.txt: tensor2tensor's worked example of relative keys.
#include <relpos/shaw.hpp>

#include <cstdint>
#include <vector>

#include "support/test_data.hpp"

namespace relpos::test {

struct ShawSeed {
  ShawParams params;                // b=2, h=3, n=4, dz=5, k=2, query_offset 0
  std::vector<float> q;             // arange(120) as [2, 3, 4, 5]
  std::vector<std::int32_t> index;  // idx(i, j), [4, 4]
  std::vector<float> table;         // rel_keys [5, 5]
  std::vector<float> expected;      // q·rel_keys[idx(i, j)], [2, 3, 4, 4]
};

inline ShawSeed shaw_seed() {
  ShawSeed s;
  s.params.max_relative_position = 2;
  s.params.batch = 2;
  s.params.heads = 3;
  s.params.queries = s.params.keys = 4;
  s.params.head_dim = 5;
  for (int e = 0; e < 120; ++e) s.q.push_back(static_cast<float>(e));
  std::vector<float> index;
  std::vector<float>* into = nullptr;
  for (const auto& w : data_lines("shaw_seed002.txt")) {
    if (w[0] == "index") into = &index;
    else if (w[0] == "table") into = &s.table;
    else if (w[0] == "expected") into = &s.expected;
    else
      for (const auto& x : w) into->push_back(std::stof(x));
  }
  for (float x : index) s.index.push_back(static_cast<std::int32_t>(x));
  return s;
}

}  // namespace relpos::test
