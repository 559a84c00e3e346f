// KV caches of any CacheFormat as .npy files (cache_npy.hpp).
#include "cache_npy.hpp"

#include <relpos/error.hpp>
#include <relpos/npy.hpp>

#include "attention_bias.hpp"
#include "registry.hpp"

namespace relpos::tool {
namespace {

// The numpy type of a format's stored element, its size, and what the file holds.
struct Stored {
  const char* descr;
  std::uint32_t bytes;
  const char* what;
};
Stored stored(CacheFormat f) {
  switch (f) {
    case CacheFormat::F32: return {"<f4", 4, "float32 values"};
    case CacheFormat::F16: return {"<f2", 2, "float16 values"};
    case CacheFormat::BF16: return {"<u2", 2, "uint16 bfloat16 bit patterns"};
    case CacheFormat::Q8_0: return {"|u1", 1, "uint8 bytes (head_dim / 32 blocks of 34)"};
    case CacheFormat::FP8_E4M3: return {"|u1", 1, "uint8 e4m3 bytes"};
  }
  return {"?", 1, "?"};
}

}  // namespace

CacheFormat cache_format_flag(const std::string& name) {
  if (const auto f = parse_cache_format(name)) return *f;
  throw InvalidArgument("--kv-dtype " + name + ": must be one of f32, f16, bf16, q8_0, fp8_e4m3");
}

KvFiles read_kv_npy(std::optional<CacheFormat> format, const std::string& k_flag, const std::string& k_path, const std::string& v_flag,
                    const std::string& v_path, std::vector<std::uint64_t>& shape) {
  KvFiles f;
  std::vector<std::uint64_t> vs;
  if (format) {
    f.k_bytes = read_cache_npy(k_flag, k_path, *format, shape);
    f.v_bytes = read_cache_npy(v_flag, v_path, *format, vs);
  } else {
    f.k = read_floats(k_flag, k_path, 4, shape);
    f.v = read_floats(v_flag, v_path, 4, vs);
  }
  if (shape.size() != 4) throw InvalidArgument(k_flag + " " + k_path + ": must be 4-D, got " + std::to_string(shape.size()) + " dimension(s)");
  if (shape != vs) throw InvalidArgument(v_flag + ": shape " + shape_text(vs) + " must equal " + k_flag + "'s " + shape_text(shape));
  return f;
}

std::vector<std::uint8_t> read_cache_npy(const std::string& flag, const std::string& path, CacheFormat format, std::vector<std::uint64_t>& shape) {
  const NpyArray a = read_npy(path);
  const Stored s = stored(format);
  const std::string fmt(cache_format_name(format));
  // A float16 array of an f16 cache may also be given as float32 values: converted, as --dtype f16 reads them.
  std::string want = s.descr;
  if (want[0] == '|') want[0] = '<';  // read_npy gives single-byte types as '<'
  if (a.descr != want && !(format == CacheFormat::F16 && a.descr == "<f4"))
    throw InvalidArgument(flag + " " + path + ": a cache of format " + fmt + " is a .npy of " + s.what + " (dtype " + s.descr + "), got " + a.descr);
  if (a.shape.empty()) throw InvalidArgument(flag + " " + path + ": must have a row dimension");
  shape = a.shape;
  const std::uint64_t last = shape.back();
  if (format == CacheFormat::Q8_0) {
    if (last % 34 != 0 || last == 0)
      throw InvalidArgument(flag + " " + path + ": a q8_0 row is head_dim / 32 blocks of 34 bytes, got " + std::to_string(last) + " bytes");
    shape.back() = last / 34 * 32;
  }
  if (format == CacheFormat::F16 && a.descr == "<f4") {  // values: encode as the cache stores them
    const std::vector<float> values = a.to_f32(flag + " " + path);
    std::vector<std::uint8_t> bytes(values.size() * 2);
    for (std::size_t r = 0; r < values.size() / last; ++r)
      encode_cache_row(format, std::span<const float>(values).subspan(r * last, last), std::span<std::uint8_t>(bytes).subspan(r * last * 2, last * 2));
    return bytes;
  }
  return {a.bytes.begin(), a.bytes.end()};
}

std::vector<std::int32_t> read_sequence_counts(const std::string& flag, const std::string& path) {
  const NpyArray a = read_npy(path);
  if (a.shape.size() != 1)
    throw InvalidArgument(flag + " " + path + ": must be int32 [batch] (one per sequence), got " + std::to_string(a.shape.size()) + "-D");
  return a.to_i32(flag + " " + path);
}

void write_cache_npy(const std::string& path, CacheFormat format, const std::vector<std::uint64_t>& shape, const std::vector<std::uint8_t>& bytes) {
  std::vector<std::uint64_t> stored_shape = shape;
  const Stored s = stored(format);
  stored_shape.back() = cache_row_bytes(format, static_cast<std::uint32_t>(shape.back())) / s.bytes;
  write_npy(path, s.descr, stored_shape, bytes.data());
}

}  // namespace relpos::tool
