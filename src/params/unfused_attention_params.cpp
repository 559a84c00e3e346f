// MatmulParams and UnfusedAttentionParams: the checks, element counts and masks.
#include <cmath>
#include <string>

#include "params/checks.hpp"
#include "relpos/unfused_attention.hpp"

namespace relpos {

using detail::require;

namespace {
void require_storage(DType t, const std::string& name) {
  detail::require_f32_or_f16(t, name);
}
}  // namespace

void MatmulParams::validate() const {
  require(batch >= 1, "batch", std::to_string(batch), "must be >= 1");
  require(m >= 1, "m", std::to_string(m), "must be >= 1");
  require(n >= 1, "n", std::to_string(n), "must be >= 1");
  require(k >= 1, "k", std::to_string(k), "must be >= 1");
  require(std::isfinite(alpha), "alpha", std::to_string(alpha), "must be finite");
  require_storage(a_dtype, "a_dtype");
  require_storage(b_dtype, "b_dtype");
  require_storage(c_dtype, "c_dtype");
  require(a_row_stride >= k, "a_row_stride", std::to_string(a_row_stride), "must be >= k = " + std::to_string(k));
  const std::uint32_t b_cols = b_transposed ? k : n;
  require(b_row_stride >= b_cols, "b_row_stride", std::to_string(b_row_stride), "must be >= " + std::to_string(b_cols));
  require(c_row_stride >= n, "c_row_stride", std::to_string(c_row_stride), "must be >= n = " + std::to_string(n));
  // Shaders index each operand with 32-bit element offsets.
  for (auto [name, e] : {std::pair{"A", a_elements()}, {"B", b_elements()}, {"C", c_elements()}})
    require(e < 0xffffffffull, std::string("matmul operand ") + name, std::to_string(e) + " elements", "must be < 2^32 elements");
}

std::uint64_t MatmulParams::a_elements() const {
  return detail::checked_elements({batch - 1ull, a_batch_stride}, "A") + detail::checked_elements({m - 1ull, a_row_stride}, "A") + k;
}
std::uint64_t MatmulParams::b_elements() const {
  const std::uint64_t rows = b_transposed ? n : k, cols = b_transposed ? k : n;
  return detail::checked_elements({batch - 1ull, b_batch_stride}, "B") + detail::checked_elements({rows - 1, b_row_stride}, "B") + cols;
}
std::uint64_t MatmulParams::c_elements() const {
  return detail::checked_elements({batch - 1ull, c_batch_stride}, "C") + detail::checked_elements({m - 1ull, c_row_stride}, "C") + n;
}

MatmulParams dense_matmul(std::uint32_t batch, std::uint32_t m, std::uint32_t n, std::uint32_t k, bool b_transposed) {
  MatmulParams p;
  p.batch = batch;
  p.m = m;
  p.n = n;
  p.k = k;
  p.b_transposed = b_transposed;
  p.a_batch_stride = std::uint64_t{m} * k;
  p.a_row_stride = k;
  p.b_batch_stride = std::uint64_t{k} * n;
  p.b_row_stride = b_transposed ? k : n;
  p.c_batch_stride = std::uint64_t{m} * n;
  p.c_row_stride = n;
  return p;
}

void UnfusedAttentionParams::validate() const {
  require(batch >= 1, "batch", std::to_string(batch), "must be >= 1");
  require(heads >= 1, "heads", std::to_string(heads), "must be >= 1");
  require(queries >= 1, "queries", std::to_string(queries), "must be >= 1");
  require(keys >= 1, "keys", std::to_string(keys), "must be >= 1");
  require(head_dim >= 1 && head_dim <= kMaxHeadDim, "head_dim", std::to_string(head_dim), "must be >= 1 and <= " + std::to_string(kMaxHeadDim));
  require(std::isfinite(scale), "scale", detail::number_text(scale), "must be finite");
  require_storage(dtype, "dtype");
  require(key_lengths.empty() || key_lengths.size() == batch, "key_lengths", std::to_string(key_lengths.size()) + " lengths",
          "must be empty or one per batch (" + std::to_string(batch) + ")");
  for (std::uint32_t len : key_lengths)
    require(len <= keys, "key_lengths", std::to_string(len), "must be <= keys = " + std::to_string(keys));
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  require(query_offset > -kMax / 2 && query_offset < kMax / 2, "query_offset", std::to_string(query_offset),
          "must be within +-(2^30 - 2) (relative positions are 32-bit on the GPU)");
  const std::uint64_t rows = detail::checked_elements({batch, heads, queries}, "batch * heads * queries");
  require(rows < 0xffffffffull, "batch * heads * queries", std::to_string(rows), "must be < 2^32");
  for (auto [name, e] : {std::pair{"batch * heads * queries * keys", detail::checked_elements({rows, keys}, "logits")},
                         {"batch * heads * queries * head_dim", detail::checked_elements({rows, head_dim}, "q")},
                         {"batch * heads * keys * head_dim", detail::checked_elements({batch, heads, keys, head_dim}, "k")}})
    require(e < 0xffffffffull, name, std::to_string(e), "must be < 2^32 elements");
}

bool UnfusedAttentionParams::masked(std::uint32_t b, std::uint32_t i, std::uint32_t j) const {
  if (causal && static_cast<std::int64_t>(j) > static_cast<std::int64_t>(i) + query_offset) return true;
  return !key_lengths.empty() && j >= key_lengths[b];
}

}  // namespace relpos
