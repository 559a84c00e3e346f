// The KERPLE per-distance rows (kerple_row.hpp).
#include "ops/kerple_row.hpp"

#include "relpos_push/kerple.h"

namespace relpos::detail {

std::unique_ptr<DistanceRows> kerple_rows(Context& ctx, KerpleVariant variant) {
  auto push = [variant](const DistanceWindow& w) {
    push::KerpleRowPush pc{};
    pc.heads = w.heads;
    pc.variant = static_cast<std::uint32_t>(variant);
    return pc;
  };
  return std::make_unique<ShaderRows<push::KerpleRowPush>>(ctx, ShaderId::kerple_distance_row, push);
}

}  // namespace relpos::detail
