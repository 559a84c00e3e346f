#include "relpos/float_buffer.hpp"

#include <string>

#include "params/checks.hpp"
#include "relpos/cache_format.hpp"
#include "relpos/error.hpp"
#include "relpos/half.hpp"

namespace relpos {
namespace {
void require_float(DType dtype) {
  detail::require(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16, "dtype", detail::dtype_text(dtype),
                  "a float buffer must be f32, f16 or bf16");
}
}  // namespace

Buffer make_float_buffer(Context& ctx, std::span<const float> values, DType dtype) {
  require_float(dtype);
  if (dtype == DType::F16) return make_buffer(ctx, to_half(values));
  if (dtype == DType::BF16) return make_buffer(ctx, to_bf16(values));
  return make_buffer(ctx, values);
}

std::vector<float> download_floats(const Buffer& buffer, std::size_t count, DType dtype) {
  require_float(dtype);
  if (dtype == DType::F16) return from_half(buffer.download<std::uint16_t>(count));
  if (dtype == DType::BF16) return from_bf16(buffer.download<std::uint16_t>(count));
  return buffer.download<float>(count);
}

std::vector<float> rounded_to_storage(std::span<const float> values, DType dtype) {
  require_float(dtype);
  if (dtype == DType::F16) return from_half(to_half(values));
  if (dtype == DType::BF16) return from_bf16(to_bf16(values));
  return {values.begin(), values.end()};
}

}  // namespace relpos
