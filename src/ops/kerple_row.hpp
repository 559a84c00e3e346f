#pragma once
// The KERPLE per-distance rows (kerple_distance_row.comp on the kit's skeleton), shared by the
// KERPLE bias ops, BiasPlan and fused attention: parameters float32 [2, heads], r1 then r2.
#include <memory>

#include "ops/distance_bias.hpp"
#include "relpos/context.hpp"
#include "relpos/kerple.hpp"

namespace relpos::detail {

std::unique_ptr<DistanceRows> kerple_rows(Context& ctx, KerpleVariant variant);

}  // namespace relpos::detail
