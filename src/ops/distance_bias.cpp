#include "ops/distance_bias.hpp"

#include <cstring>
#include <string>

namespace relpos::detail {

const Buffer& upload_floats(Recorder& r, std::span<const float> values) {
  Buffer& b = scratch(r, values.size_bytes(), MemoryUse::Host);
  if (!values.empty()) std::memcpy(b.host_pointer(), values.data(), values.size_bytes());
  return b;
}

void expand_distance_bias(Recorder& r, const DistanceWindow& w, const Buffer& out, ExpandMode mode, const RowsRecorder& rows) {
  const ExpandShape shape = expand_shape(w, mode);
  check_expand(r.context().limits(), shape, out, mode);
  const auto op = begin_op(r);
  expand_distance(r, shape, rows(r), out, mode);
}

void distance_bias(Recorder& r, const DistanceWindow& w, const Buffer& out, DType dtype, const RowsRecorder& rows) {
  require(dtype != DType::I32, "out_dtype", "i32", "must be f32 or f16");
  expand_distance_bias(r, w, out, expand_mode(dtype, false), rows);
}

void distance_bias_add(Recorder& r, const DistanceWindow& w, const Buffer& logits, DType dtype, const RowsRecorder& rows) {
  expand_distance_bias(r, w, logits, expand_mode(dtype, true), rows);
}

}  // namespace relpos::detail
