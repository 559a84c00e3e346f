// ShawParams and ShawAttentionParams: the checks and the clipped relative index.
#include <algorithm>
#include <string>

#include "params/checks.hpp"
#include "relpos/shaw.hpp"

namespace relpos {

using detail::require;

void ShawParams::validate() const {
  require(max_relative_position >= 1, "max_relative_position", std::to_string(max_relative_position), "must be >= 1");
  require(max_relative_position <= (1u << 30), "max_relative_position", std::to_string(max_relative_position),
          "must be <= 2^30 (2k + 1 table rows fit 32 bits)");
  UnfusedAttentionParams a;
  a.batch = batch;
  a.heads = heads;
  a.queries = queries;
  a.keys = keys;
  a.head_dim = head_dim;
  a.scale = scale;
  a.query_offset = query_offset;
  a.validate();
  // The shaders take j - (i + query_offset) ± k in 32-bit signed arithmetic.
  const std::int64_t reach = std::int64_t{queries} + keys + 2ll * max_relative_position + (query_offset < 0 ? -query_offset : query_offset);
  require(reach < (std::int64_t{1} << 31), "queries + keys + 2k + |query_offset|", std::to_string(reach), "must be < 2^31");
  const std::uint64_t p_elems = std::uint64_t{batch} * heads * queries * table_rows();
  require(p_elems < 0xffffffffull, "batch * heads * queries * (2k + 1)", std::to_string(p_elems), "must be < 2^32 elements");
}

std::int32_t ShawParams::index(std::uint32_t i, std::uint32_t j) const {
  const std::int64_t k = max_relative_position;
  const std::int64_t rp = static_cast<std::int64_t>(j) - static_cast<std::int64_t>(i) - query_offset;
  return static_cast<std::int32_t>(std::clamp(rp, -k, k) + k);
}

std::int64_t t2t_query_offset(std::uint32_t queries, std::uint32_t keys) {
  return static_cast<std::int64_t>(keys) - static_cast<std::int64_t>(queries);
}

ShawParams ShawAttentionParams::shaw() const {
  ShawParams s;
  s.max_relative_position = max_relative_position;
  s.batch = attention.batch;
  s.heads = attention.heads;
  s.queries = attention.queries;
  s.keys = attention.keys;
  s.head_dim = attention.head_dim;
  s.query_offset = attention.query_offset;
  s.scale = attention.scale;
  return s;
}

void ShawAttentionParams::validate() const {
  attention.validate();
  shaw().validate();
}

}  // namespace relpos
