// CPU reference of kv_append: per sequence, rope_reference on copies of its new keys (and
// queries) at the positions cache_lengths[b] + t, then each row into its block of the cache, as
// values or encoded in the cache's format (encode_cache_row).
#include <algorithm>
#include <string>
#include <vector>

#include "params/checks.hpp"
#include "params/paged_table.hpp"
#include "relpos/kv_cache.hpp"

namespace relpos {
namespace {

using detail::require;

std::string str(std::uint64_t v) { return std::to_string(v); }

// `shape` says what the size is made of: the reference takes each input at exactly its size.
void require_size(std::size_t got, std::uint64_t want, const std::string& name, const std::string& shape, const char* unit = " values") {
  require(got == want, name, str(got) + unit, "must be exactly " + shape + " = " + str(want));
}

}  // namespace

void kv_append_reference(const KvAppendParams& p, const KvAppendHostData& d) {
  p.validate();
  const std::uint64_t D = p.head_dim, T = p.new_tokens, rows = p.input_rows();
  const bool encoded = p.cache_format.has_value();
  if (encoded) {
    require_size(d.k_cache_bytes.size(), p.cache_bytes(), "k_cache_bytes", "KvAppendParams::cache_bytes()", " bytes");
    require_size(d.v_cache_bytes.size(), p.cache_bytes(), "v_cache_bytes", "KvAppendParams::cache_bytes()", " bytes");
  } else {
    const std::uint64_t cache = p.paged.cache_elements(p.kv_heads, p.head_dim);
    require_size(d.k_cache.size(), cache, "k_cache", "num_blocks * block_size * kv_heads * head_dim");
    require_size(d.v_cache.size(), cache, "v_cache", "num_blocks * block_size * kv_heads * head_dim");
  }
  const std::string rows_are = p.ragged ? "packed_tokens" : "batch * new_tokens";
  require_size(d.k.size(), rows * p.kv_heads * D, "k", rows_are + " * kv_heads * head_dim");
  require_size(d.v.size(), rows * p.kv_heads * D, "v", rows_are + " * kv_heads * head_dim");
  require(d.q.empty() || d.q.size() == rows * p.heads * D, "q", str(d.q.size()) + " values",
          "must be empty or exactly " + rows_are + " * heads * head_dim = " + str(rows * p.heads * D));
  require(d.advanced_lengths.size() == (p.advance_lengths ? p.batch : 0u), "advanced_lengths", str(d.advanced_lengths.size()) + " values",
          p.advance_lengths ? "must hold batch = " + str(p.batch) : std::string("must be empty without advance_lengths"));
  check_append_table(p, d.block_table, d.cache_lengths, p.ragged ? d.new_tokens : std::span<const std::int32_t>());

  const std::uint32_t bs = p.paged.block_size;
  const std::uint64_t row_bytes = cache_row_bytes(p.cache(), p.head_dim);
  std::uint64_t cu = 0;  // ragged: the first packed row of sequence b
  for (std::uint32_t b = 0; b < p.batch; ++b) {
    const std::uint32_t n = p.ragged ? static_cast<std::uint32_t>(d.new_tokens[b]) : p.new_tokens;
    const std::int32_t L = d.cache_lengths[b] - (p.lengths_include_new ? static_cast<std::int32_t>(n) : 0);  // before the append
    // Row (h, t) of sequence b in an input of `heads` heads.
    auto at = [&](std::uint32_t heads, std::uint32_t h, std::uint32_t t) {
      return p.ragged ? ((cu + t) * heads + h) * D : ((std::uint64_t{b} * heads + h) * T + t) * D;
    };
    // The sequence's rows of x as [1, heads, n, head_dim], rotated to positions L + t.
    auto rotated = [&](std::span<const float> x, std::uint32_t heads) {
      std::vector<float> rows_of_b(std::size_t{heads} * n * D);
      for (std::uint32_t h = 0; h < heads; ++h)
        for (std::uint32_t t = 0; t < n; ++t) std::copy_n(x.begin() + at(heads, h, t), D, rows_of_b.begin() + (std::size_t{h} * n + t) * D);
      if (p.apply_rope && n > 0) {
        RopeParams rp = p.rope_params(heads);
        rp.batch = 1;
        rp.seq = n;
        std::vector<std::int32_t> positions(n);
        for (std::uint32_t t = 0; t < n; ++t) positions[t] = L + static_cast<std::int32_t>(t);
        rope_reference(rp, rows_of_b, positions);
      }
      return rows_of_b;
    };
    const std::vector<float> k = rotated(d.k, p.kv_heads);
    if (!d.q.empty() && p.apply_rope) {
      const std::vector<float> q = rotated(d.q, p.heads);
      for (std::uint32_t h = 0; h < p.heads; ++h)
        for (std::uint32_t t = 0; t < n; ++t) std::copy_n(q.begin() + (std::size_t{h} * n + t) * D, D, d.q.begin() + at(p.heads, h, t));
    }
    for (std::uint32_t hk = 0; hk < p.kv_heads; ++hk)
      for (std::uint32_t t = 0; t < n; ++t) {
        const std::uint32_t j = static_cast<std::uint32_t>(L) + t;
        const std::size_t block = static_cast<std::size_t>(d.block_table[std::size_t{b} * p.paged.max_blocks + j / bs]);
        const std::size_t row = (block * bs + j % bs) * p.kv_heads + hk;
        const std::span<const float> k_row(k.data() + (std::size_t{hk} * n + t) * D, D), v_row(d.v.data() + at(p.kv_heads, hk, t), D);
        if (encoded) {
          encode_cache_row(p.cache(), k_row, d.k_cache_bytes.subspan(row * row_bytes, row_bytes), p.k_scales.empty() ? 1.0f : p.k_scales[hk]);
          encode_cache_row(p.cache(), v_row, d.v_cache_bytes.subspan(row * row_bytes, row_bytes), p.v_scales.empty() ? 1.0f : p.v_scales[hk]);
        } else {
          std::copy(k_row.begin(), k_row.end(), d.k_cache.begin() + row * D);
          std::copy(v_row.begin(), v_row.end(), d.v_cache.begin() + row * D);
        }
      }
    if (p.advance_lengths) d.advanced_lengths[b] = L + static_cast<std::int32_t>(n);
    cu += n;
  }
}

}  // namespace relpos
