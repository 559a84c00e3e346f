// The families whose input is the bias itself, with no operation of their own: none, distance
// rows given by the caller (any bias of (head, rp), as the rows fused attention reads), and a dense
// [heads, queries, keys] tensor (the general fallback, for biases that are not a function of rp).
#include <string>

#include "bias/bias_family.hpp"
#include "relpos_push/attention.h"

namespace relpos::detail {
namespace {

std::uint64_t row_len(const AttentionParams& p) { return std::uint64_t{p.queries} + p.keys - 1; }
// Relative position of row entry 0.
std::int64_t rp_first(const AttentionParams& p) { return -(static_cast<std::int64_t>(p.queries) - 1) - p.row_query_offset(); }

// Each head's row of `to` is the part of `from`'s row at to's relative positions.
std::vector<float> sub_rows(const AttentionParams& from, std::span<const float> input, const AttentionParams& to, std::uint32_t,
                            std::uint32_t) {
  const std::uint64_t shift = static_cast<std::uint64_t>(rp_first(to) - rp_first(from));
  std::vector<float> out;
  out.reserve(row_len(to) * to.heads);
  for (std::uint32_t h = 0; h < to.heads; ++h) {
    const auto row = input.begin() + static_cast<std::ptrdiff_t>(h * row_len(from) + shift);
    out.insert(out.end(), row, row + static_cast<std::ptrdiff_t>(row_len(to)));
  }
  return out;
}

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

extern const BiasFamily kNoBias{.info = {.bias = AttentionBias::None, .name = "none"}, .kernel_mode = RELPOS_ATTN_NONE};

extern const BiasFamily kDistanceBias{
    .info = {.bias = AttentionBias::Distance, .name = "distance", .input = "float32 [heads, queries + keys - 1]"},
    .kernel_mode = RELPOS_ATTN_ROW,
    .may_mask = true,
    .input_shape = [](const AttentionParams& p) { return std::vector<std::uint64_t>{p.heads, row_len(p)}; },
    .bias_at = [](const AttentionParams& p, std::span<const float> in, std::uint32_t h, std::uint32_t, std::uint32_t, std::int64_t rp) {
      return in[h * row_len(p) + static_cast<std::uint64_t>(rp - rp_first(p))];
    },
    .sub_input = sub_rows,
};


extern const BiasFamily kDenseBias{
    .info = {.bias = AttentionBias::Dense, .name = "dense", .input = "float32 [heads, queries, keys]", .relative = false},
    .kernel_mode = RELPOS_ATTN_DENSE,
    .may_mask = true,
    .input_shape = [](const AttentionParams& p) { return std::vector<std::uint64_t>{p.heads, p.queries, p.keys}; },
    .bias_at = [](const AttentionParams& p, std::span<const float> in, std::uint32_t h, std::uint32_t i, std::uint32_t j, std::int64_t) {
      return in[(std::uint64_t{h} * p.queries + i) * p.keys + j];
    },
    .sub_input = sub_block,
};


}  // namespace relpos::detail
