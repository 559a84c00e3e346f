// decode_cache: kv_cache_decode.comp over every row, four values an invocation (two where
// head_dim % 4 == 2); and its host twin.
#include <cstring>
#include <string>

#include "ops/planner.hpp"
#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/kv_cache.hpp"
#include "relpos_contract/kv_cache_decode.h"
#include "relpos_push/kv_cache_decode.h"
#include "vk/access.hpp"
#include "vk/dispatch.hpp"

namespace relpos {

using detail::require;

void CacheDecodeParams::validate() const {
  require(rows >= 1, "rows", std::to_string(rows), "must be >= 1");
  require(kv_heads >= 1, "kv_heads", std::to_string(kv_heads), "must be >= 1");
  check_cache_head_dim(format, head_dim);
  check_cache_scales(format, scales, kv_heads, "scales");
  require(std::uint64_t{rows} * head_dim <= 0xffffffffull, "rows * head_dim", std::to_string(std::uint64_t{rows} * head_dim), "must be < 2^32");
}

void decode_cache_reference(const CacheDecodeParams& p, std::span<const std::uint8_t> cache, std::span<float> out) {
  p.validate();
  require(cache.size() == p.cache_bytes(), "cache", std::to_string(cache.size()) + " bytes", "must hold rows * row bytes = " + std::to_string(p.cache_bytes()));
  require(out.size() == std::uint64_t{p.rows} * p.head_dim, "out", std::to_string(out.size()) + " values",
          "must hold rows * head_dim = " + std::to_string(std::uint64_t{p.rows} * p.head_dim));
  const std::uint64_t rb = cache_row_bytes(p.format, p.head_dim);
  for (std::uint32_t i = 0; i < p.rows; ++i)
    decode_cache_row(p.format, cache.subspan(i * rb, rb), out.subspan(std::size_t{i} * p.head_dim, p.head_dim),
                     p.scales.empty() ? 1.0f : p.scales[i % p.kv_heads]);
}

void decode_cache(Recorder& r, const CacheDecodeParams& p, const Buffer& cache, const Buffer& out) {
  p.validate();
  const DeviceLimits& lim = r.context().limits();
  detail::require_bound_whole(lim, &cache, p.cache_bytes(), false, "cache buffer", [&] { return std::string("rows * row bytes"); });
  detail::require_bound_whole(lim, &out, std::uint64_t{p.rows} * p.head_dim * 4, false, "out buffer",
                              [] { return std::string("float32 [rows, head_dim]"); });
  detail::require_own_buffers(r, {{&cache, "cache buffer"}, {&out, "out buffer", true}});
  constexpr std::uint32_t kGroup = 64;
  const bool pairs = p.head_dim % 4 != 0;
  push::KvCacheDecodePush pc{};
  pc.units_per_row = p.head_dim / (pairs ? 2 : 4);
  pc.units = p.rows * pc.units_per_row;
  pc.head_dim = p.head_dim;
  pc.kv_heads = p.kv_heads;
  const contract::KvCacheDecodeSpec spec{.WG_X = kGroup, .FORMAT = static_cast<std::uint32_t>(p.format), .PAIRS = pairs ? 1u : 0u};
  const auto op = detail::begin_op(r);
  const std::vector<float> scales = p.scales.empty() ? std::vector<float>{1.0f} : p.scales;
  Buffer& sb = detail::scratch(r, scales.size() * 4, MemoryUse::Host);
  if (sb.host_pointer()) std::memcpy(sb.host_pointer(), scales.data(), scales.size() * 4);
  detail::for_each_group_range(lim, detail::div_up(pc.units, kGroup), [&](std::uint64_t first, std::uint32_t groups) {
    pc.first = static_cast<std::uint32_t>(first * kGroup);
    detail::dispatch(r, detail::ShaderId::kv_cache_decode, spec,
                     contract::KvCacheDecodeBindings{.CACHE = {&cache}, .SCALES = {&sb}, .OUT = {&out}}, pc, groups);
  });
}

}  // namespace relpos
