// CPU reference for RoPE, straight from docs/alibi_rope.md, RoPE (the frequencies of each scaling:
// params/rope_params.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#include "params/checks.hpp"
#include "relpos/rope.hpp"

namespace relpos {

using detail::require;

void rope_reference(const RopeParams& p, std::span<float> x, std::span<const std::int32_t> positions) {
  const RopeFrequencies fr = rope_frequencies(p, !positions.empty());
  const std::uint64_t n = p.elements();
  require(x.size() == n, "x", std::to_string(x.size()) + " values", "must hold batch * seq * heads * head_dim = " + std::to_string(n));
  require(positions.empty() || positions.size() == std::size_t{p.batch} * p.seq, "positions", std::to_string(positions.size()) + " values",
          "must hold batch * seq = " + std::to_string(std::size_t{p.batch} * p.seq));
  const std::uint32_t d = p.rot_dim(), half = d / 2;
  const double a = fr.attention_factor;
  for (std::uint32_t b = 0; b < p.batch; ++b)
    for (std::uint32_t s = 0; s < p.seq; ++s) {
      const std::int64_t pos = positions.empty() ? p.position_offset + s : positions[std::size_t{b} * p.seq + s];
      for (std::uint32_t h = 0; h < p.heads; ++h) {
        const std::size_t row = p.layout == RopeLayout::BSHD ? (std::size_t{b} * p.seq + s) * p.heads + h
                                                             : (std::size_t{b} * p.heads + h) * p.seq + s;
        float* v = x.data() + row * p.head_dim;
        for (std::uint32_t k = 0; k < half; ++k) {
          const float angle = static_cast<float>(pos) * fr.inv_freq[k];  // HuggingFace's float32 product
          const double c = std::cos(static_cast<double>(angle)), sn = std::sin(static_cast<double>(angle));
          float& xa = v[p.style == RopeStyle::NeoX ? k : 2 * k];
          float& xb = v[p.style == RopeStyle::NeoX ? k + half : 2 * k + 1];
          const double u = xa, w = xb;
          if (p.inverse) {
            xa = static_cast<float>((u * c + w * sn) / a);
            xb = static_cast<float>((w * c - u * sn) / a);
          } else {
            xa = static_cast<float>((u * c - w * sn) * a);
            xb = static_cast<float>((u * sn + w * c) * a);
          }
        }
      }
    }
}

}  // namespace relpos
