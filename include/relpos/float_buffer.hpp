#pragma once
// Float tensors stored as f32 or f16 on the device: upload float values in the storage dtype,
// download them back as float.
#include <cstddef>
#include <span>
#include <vector>

#include "relpos/buffer.hpp"
#include "relpos/dtype.hpp"

namespace relpos {

// A buffer holding `values` as f32, or rounded to f16 (dtype F16).
Buffer make_float_buffer(Context& ctx, std::span<const float> values, DType dtype);
// The first `count` values of an f32 or f16 buffer, as float.
std::vector<float> download_floats(const Buffer& buffer, std::size_t count, DType dtype);
// `values` as a buffer of `dtype` holds them: rounded to half for F16, unchanged for F32 (what a
// reference must read to be compared with a GPU op that stores halves).
std::vector<float> rounded_to_storage(std::span<const float> values, DType dtype);

}  // namespace relpos
