#pragma once
// KV caches of any CacheFormat as .npy files (docs/paged_attention.md, "Tool"): float32 or float16
// arrays of values for f32 and f16, uint16 arrays of bfloat16 bit patterns for bf16, uint8 arrays of
// the rows' bytes for q8_0 ([..., head_dim / 32 * 34], ggml's blocks) and fp8_e4m3 ([..., head_dim]).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <relpos/cache_format.hpp>

namespace relpos::tool {

// The format --kv-dtype names; InvalidArgument listing the names otherwise.
CacheFormat cache_format_flag(const std::string& name);

// The cache in `path` as `format`'s bytes: its shape's last dimension is the row (head_dim values,
// or a q8_0 / fp8 row's bytes); `shape` gets the shape with head_dim last. InvalidArgument naming
// `flag` for a file of another element type or row length.
std::vector<std::uint8_t> read_cache_npy(const std::string& flag, const std::string& path, CacheFormat format, std::vector<std::uint64_t>& shape);
// k and v as the tool reads them (their flags and files): float values, or with a cache format the
// format's bytes (read_cache_npy). `shape` gets their shape, head_dim last; InvalidArgument naming
// the flags unless both are 4-D of one shape.
struct KvFiles {
  std::vector<float> k, v;
  std::vector<std::uint8_t> k_bytes, v_bytes;  // with a cache format, in place of k and v
};
KvFiles read_kv_npy(std::optional<CacheFormat> format, const std::string& k_flag, const std::string& k_path, const std::string& v_flag,
                    const std::string& v_path, std::vector<std::uint64_t>& shape);
// A paged call's per-sequence int32 counts (--cache-lengths, --query-lengths, --new-tokens): a 1-D
// array, one per sequence; InvalidArgument naming `flag` for any other shape.
std::vector<std::int32_t> read_sequence_counts(const std::string& flag, const std::string& path);
// Writes the cache's bytes as read_cache_npy reads them; `shape` with head_dim last.
void write_cache_npy(const std::string& path, CacheFormat format, const std::vector<std::uint64_t>& shape, const std::vector<std::uint8_t>& bytes);

}  // namespace relpos::tool
