// Distance rows given by the caller: any bias of (head, rp), as the per-distance rows
// [heads, queries + keys - 1] fused attention reads (the rows T5, KERPLE and Sandwich compute).
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

}  // namespace

extern const BiasFamily kDistanceBias{
    .info = {.bias = AttentionBias::Distance, .name = "distance", .input = "float32 [heads, queries + keys - 1]"},
    .kernel_mode = RELPOS_ATTN_ROW,
    .input_elements = [](const AttentionParams& p) { return std::uint64_t{p.heads} * row_len(p); },
    .bias_at = [](const AttentionParams& p, std::span<const float> in, std::uint32_t h, std::uint32_t, std::uint32_t, std::int64_t rp) {
      return in[h * row_len(p) + static_cast<std::uint64_t>(rp - rp_first(p))];
    },
    .sub_input = sub_rows,
};

}  // namespace relpos::detail
