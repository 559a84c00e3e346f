#pragma once
// Float tensors in f32 or f16 storage on the GPU, as the reference sees them.
#include <relpos/relpos.hpp>

#include <cmath>
#include <vector>

namespace relpos::test {

// The values a buffer of dtype `t` holds for x (f16: each rounded to half).
inline std::vector<float> as_stored(const std::vector<float>& x, DType t) { return t == DType::F16 ? from_half(to_half(x)) : x; }

inline Buffer upload(Context& ctx, const std::vector<float>& x, DType t) {
  if (t == DType::F16) return make_buffer(ctx, to_half(x));
  return make_buffer(ctx, x);
}

inline std::vector<float> download(const Buffer& b, std::size_t n, DType t) {
  return t == DType::F16 ? from_half(b.download<std::uint16_t>(n)) : b.download<float>(n);
}

inline std::vector<float> abs_of(std::vector<float> x) {
  for (float& v : x) v = std::abs(v);
  return x;
}

}  // namespace relpos::test
