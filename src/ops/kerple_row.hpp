#pragma once
// The KERPLE per-distance rows, shared by the KERPLE bias ops and fused attention.
#include "params/distance_window.hpp"
#include "relpos/buffer.hpp"
#include "relpos/kerple.hpp"
#include "relpos/recorder.hpp"

namespace relpos::detail {

class DescriptorSource;

// Rows [heads, Q + K - 1] of the window (-inf for rp > 0 when w.causal) from `params`, float32
// [2, heads]: r1 then r2. Returns the scratch buffer, readable after the barrier it ends with.
const Buffer& kerple_distance_rows(Recorder& r, const DistanceWindow& w, KerpleVariant variant, const Buffer& params);
// The same into `rows` (at least heads * (Q + K - 1) floats), descriptor sets from `sets` (plans).
void kerple_distance_rows_into(Recorder& r, const DistanceWindow& w, KerpleVariant variant, const Buffer& params, const Buffer& rows,
                               DescriptorSource* sets);

}  // namespace relpos::detail
