// CPU reference for the attention building blocks (docs/shaw.md): sums in double, one rounding to
// float at the end, so the reference is as close to the exact value as float storage allows.
#include <cmath>
#include <limits>
#include <string>

#include "params/checks.hpp"
#include "relpos/unfused_attention.hpp"
#include "relpos/error.hpp"

namespace relpos {

using detail::require;

namespace {
void require_span(std::size_t have, std::uint64_t need, const std::string& name) {
  require(have >= need, name, std::to_string(have) + " values", "must hold at least " + std::to_string(need));
}
}  // namespace

std::vector<float> matmul_reference(const MatmulParams& p, std::span<const float> a, std::span<const float> b,
                                    std::span<const float> c_in) {
  p.validate();
  require_span(a.size(), p.a_elements(), "A");
  require_span(b.size(), p.b_elements(), "B");
  std::vector<float> c(p.c_elements(), 0.0f);
  if (p.accumulate) {
    require_span(c_in.size(), p.c_elements(), "C");
    std::copy(c_in.begin(), c_in.begin() + static_cast<std::ptrdiff_t>(c.size()), c.begin());
  }
  for (std::uint64_t bt = 0; bt < p.batch; ++bt)
    for (std::uint64_t i = 0; i < p.m; ++i)
      for (std::uint64_t j = 0; j < p.n; ++j) {
        double s = 0.0;
        for (std::uint64_t t = 0; t < p.k; ++t) {
          const float bv = p.b_transposed ? b[bt * p.b_batch_stride + j * p.b_row_stride + t]
                                          : b[bt * p.b_batch_stride + t * p.b_row_stride + j];
          s += static_cast<double>(a[bt * p.a_batch_stride + i * p.a_row_stride + t]) * bv;
        }
        float& out = c[bt * p.c_batch_stride + i * p.c_row_stride + j];
        out = static_cast<float>((p.accumulate ? out : 0.0) + p.alpha * s);
      }
  return c;
}

std::vector<float> unfused_logits_reference(const UnfusedAttentionParams& p, std::span<const float> q, std::span<const float> k) {
  p.validate();
  const std::size_t bh = std::size_t{p.batch} * p.heads;
  require_span(q.size(), bh * p.queries * p.head_dim, "q");
  require_span(k.size(), bh * p.keys * p.head_dim, "k");
  std::vector<float> logits(bh * p.queries * p.keys);
  for (std::size_t g = 0; g < bh; ++g)
    for (std::size_t i = 0; i < p.queries; ++i)
      for (std::size_t j = 0; j < p.keys; ++j) {
        double s = 0.0;
        for (std::size_t c = 0; c < p.head_dim; ++c)
          s += static_cast<double>(q[(g * p.queries + i) * p.head_dim + c]) * k[(g * p.keys + j) * p.head_dim + c];
        logits[(g * p.queries + i) * p.keys + j] = static_cast<float>(s * p.scale);
      }
  return logits;
}

void masked_softmax_reference(const UnfusedAttentionParams& p, std::span<float> logits) {
  p.validate();
  require_span(logits.size(), std::size_t{p.batch} * p.heads * p.queries * p.keys, "logits");
  for (std::uint32_t b = 0; b < p.batch; ++b)
    for (std::uint32_t h = 0; h < p.heads; ++h)
      for (std::uint32_t i = 0; i < p.queries; ++i) {
        float* row = logits.data() + ((std::size_t{b} * p.heads + h) * p.queries + i) * p.keys;
        double mx = -std::numeric_limits<double>::infinity();
        for (std::uint32_t j = 0; j < p.keys; ++j)
          if (!p.masked(b, i, j)) mx = std::max(mx, static_cast<double>(row[j]));
        double sum = 0.0;
        for (std::uint32_t j = 0; j < p.keys; ++j)
          if (!p.masked(b, i, j)) sum += std::exp(row[j] - mx);
        for (std::uint32_t j = 0; j < p.keys; ++j)
          row[j] = p.masked(b, i, j) ? 0.0f : static_cast<float>(std::exp(row[j] - mx) / sum);
      }
}

std::vector<float> unfused_attention_reference(const UnfusedAttentionParams& p, std::span<const float> q, std::span<const float> k,
                                       std::span<const float> v) {
  std::vector<float> w = unfused_logits_reference(p, q, k);
  masked_softmax_reference(p, w);
  const std::size_t bh = std::size_t{p.batch} * p.heads;
  require_span(v.size(), bh * p.keys * p.head_dim, "v");
  std::vector<float> out(bh * p.queries * p.head_dim);
  for (std::size_t g = 0; g < bh; ++g)
    for (std::size_t i = 0; i < p.queries; ++i)
      for (std::size_t c = 0; c < p.head_dim; ++c) {
        double s = 0.0;
        for (std::size_t j = 0; j < p.keys; ++j)
          s += static_cast<double>(w[(g * p.queries + i) * p.keys + j]) * v[(g * p.keys + j) * p.head_dim + c];
        out[(g * p.queries + i) * p.head_dim + c] = static_cast<float>(s);
      }
  return out;
}

}  // namespace relpos
