// A dense bias [heads, queries, keys]: the general fallback, for biases that are not a function of
// the relative position.
#include "bias/bias_family.hpp"
#include "relpos_push/attention.h"

namespace relpos::detail {
namespace {

// Rows q0 .. of to's queries, columns k0 .. of its keys.
std::vector<float> sub_block(const AttentionParams& from, std::span<const float> input, const AttentionParams& to, std::uint32_t q0,
                             std::uint32_t k0) {
  std::vector<float> out;
  out.reserve(std::uint64_t{to.heads} * to.queries * to.keys);
  for (std::uint32_t h = 0; h < to.heads; ++h)
    for (std::uint32_t i = 0; i < to.queries; ++i) {
      const auto row = input.begin() + static_cast<std::ptrdiff_t>((std::uint64_t{h} * from.queries + q0 + i) * from.keys + k0);
      out.insert(out.end(), row, row + to.keys);
    }
  return out;
}

}  // namespace

extern const BiasFamily kDenseBias{
    .info = {.bias = AttentionBias::Dense, .name = "dense", .input = "float32 [heads, queries, keys]", .relative = false},
    .kernel_mode = RELPOS_ATTN_DENSE,
    .input_elements = [](const AttentionParams& p) { return std::uint64_t{p.heads} * p.queries * p.keys; },
    .bias_at = [](const AttentionParams& p, std::span<const float> in, std::uint32_t h, std::uint32_t i, std::uint32_t j, std::int64_t) {
      return in[(std::uint64_t{h} * p.queries + i) * p.keys + j];
    },
    .sub_input = sub_block,
};

}  // namespace relpos::detail
