// The KERPLE per-distance rows (kerple_row.hpp): kerple_distance_row.comp on the kit's skeleton.
#include "ops/kerple_row.hpp"

#include "ops/distance_bias.hpp"
#include "relpos_push/kerple.h"
#include "vk/access.hpp"

namespace relpos::detail {

namespace {
push::KerpleRowPush kerple_push(const DistanceWindow& w, KerpleVariant variant) {
  push::KerpleRowPush pc{};
  pc.heads = w.heads;
  pc.variant = static_cast<std::uint32_t>(variant);
  return pc;
}
}  // namespace

const Buffer& kerple_distance_rows(Recorder& r, const DistanceWindow& w, KerpleVariant variant, const Buffer& params) {
  return record_distance_rows(r, w, ShaderId::kerple_distance_row, kerple_push(w, variant), {&params});
}

void kerple_distance_rows_into(Recorder& r, const DistanceWindow& w, KerpleVariant variant, const Buffer& params, const Buffer& rows,
                               DescriptorSource* sets) {
  record_distance_rows_into(r, w, ShaderId::kerple_distance_row, kerple_push(w, variant), {&params}, nullptr, w.heads, rows, sets);
}

void prepare_kerple_rows(Context& ctx) { device_of(ctx)->pipeline(ShaderId::kerple_distance_row, {kRowGroup}); }

}  // namespace relpos::detail
