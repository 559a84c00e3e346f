// KERPLE in fused attention: its per-distance rows computed from the caller's [r1; r2] before the
// kernels read them (kerple_distance_row.comp).
#include "bias/bias_family.hpp"
#include "ops/kerple_row.hpp"
#include "relpos/kerple.hpp"
#include "relpos_push/attention.h"

namespace relpos::detail {

extern const BiasFamily kKerpleBias{
    .info = {.bias = AttentionBias::Kerple, .name = "kerple", .input = "float32 [2, heads]: r1 then r2"},
    .kernel_mode = RELPOS_ATTN_ROW,
    .input_elements = [](const AttentionParams& p) { return std::uint64_t{2} * p.heads; },
    .check_input =
        [](const AttentionParams& p, std::span<const float> in) {
          KerpleParams k;
          k.heads = p.heads;
          k.variant = p.kerple_variant;
          k.r1.assign(in.begin(), in.begin() + p.heads);
          k.r2.assign(in.begin() + p.heads, in.end());
          k.validate_kernel();
        },
    .bias_at = [](const AttentionParams& p, std::span<const float> in, std::uint32_t h, std::uint32_t, std::uint32_t, std::int64_t rp) {
      return kerple_bias_value(in[h], in[p.heads + h], p.kerple_variant, rp);
    },
    .rows = [](Context& ctx, const AttentionParams& p, OpStorage&) { return kerple_rows(ctx, p.kerple_variant); },
};

}  // namespace relpos::detail
