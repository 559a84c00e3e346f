// The per-distance bias kit (distance_bias.hpp): rows of a source, then the expansion.
#include "ops/distance_bias.hpp"

#include <string>
#include <utility>

#include "vk/access.hpp"

namespace relpos::detail {

void prepare_row_pipeline(Context& ctx, ShaderId shader) { device_of(ctx)->pipeline(shader, contract::WorkgroupSpec{.WG_X = kRowGroup}); }

RowsRecorder source_rows(const DistanceWindow& w, SourceMaker make) {
  return [w, make = std::move(make)](Recorder& r) -> const Buffer& {
    RecordingStorage storage(r);
    const DistanceSource source = make(storage);
    Buffer& rows = scratch(r, w.row_len() * w.heads * 4, MemoryUse::Device);
    source.rows->record(r, w, *source.params, rows, nullptr);
    return rows;
  };
}

void expand_distance_bias(Recorder& r, const DistanceWindow& w, const Buffer& out, ExpandMode mode, const RowsRecorder& rows, BufferRole input) {
  const ExpandShape shape = expand_shape(w, mode);
  check_expand(r, shape, out, mode);
  require_own_buffers(r, {input, {&out, expanded_name(mode), true}});
  const auto op = begin_op(r);
  expand_distance(r, shape, rows(r), out, mode);
}

void distance_bias(Recorder& r, const DistanceWindow& w, const Buffer& out, DType dtype, const RowsRecorder& rows, BufferRole input) {
  require_f32_or_f16(dtype, "out_dtype");
  expand_distance_bias(r, w, out, expand_mode(dtype, false), rows, input);
}

void distance_bias_add(Recorder& r, const DistanceWindow& w, const Buffer& logits, DType dtype, const RowsRecorder& rows, BufferRole input) {
  expand_distance_bias(r, w, logits, expand_mode(dtype, true), rows, input);
}

}  // namespace relpos::detail
