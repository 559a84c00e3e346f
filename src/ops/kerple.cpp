// KERPLE on the GPU, on the per-distance bias kit: kerple_distance_row.comp computes the rows from
// r1 and r2 ([2, heads]); the kit expands or adds them; BiasPlan's steps and fused attention (the
// family's registry entry, below) record the same rows.
#include "bias/bias_family.hpp"
#include "ops/bias_plan_state.hpp"
#include "ops/distance_bias.hpp"
#include "params/checks.hpp"
#include "relpos/kerple.hpp"
#include "relpos_push/attention.h"
#include "relpos_push/kerple.h"

namespace relpos {
namespace detail {
namespace {

std::unique_ptr<DistanceRows> kerple_rows(Context& ctx, KerpleVariant variant) {
  auto push = [variant](const DistanceWindow& w) {
    push::KerpleRowPush pc{};
    pc.heads = w.heads;
    pc.variant = static_cast<std::uint32_t>(variant);
    return pc;
  };
  return std::make_unique<ShaderRows<push::KerpleRowPush>>(ctx, ShaderId::kerple_distance_row, push);
}

}  // namespace

// Fused attention's bias input is [r1; r2], which the rows read as they are.
extern const BiasFamily kKerpleBias{
    .info = {.bias = AttentionBias::Kerple, .name = "kerple", .input = "float32 [2, heads]: r1 then r2"},
    .kernel_mode = RELPOS_ATTN_ROW,
    .input_shape = [](const AttentionParams& p) { return std::vector<std::uint64_t>{2, p.heads}; },
    // Any other value would run as the log variant, silently (the rows' shader and the reference
    // test for power only).
    .validate = [](const AttentionParams& p) {
      require_one_of(p.kerple_variant, {KerpleVariant::Log, KerpleVariant::Power}, "kerple_variant", "must be log or power");
    },
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

}  // namespace detail

detail::DistanceSource distance_source(Context& ctx, const KerpleParams& p, detail::OpStorage& storage) {
  std::vector<float> params = p.r1;  // [2, heads]
  params.insert(params.end(), p.r2.begin(), p.r2.end());
  return {detail::kerple_rows(ctx, p.variant), &storage.upload<float>(params, "r1, r2")};
}

void kerple_bias(Recorder& r, const KerpleParams& p, const Buffer& out, DType out_dtype) { detail::family_bias(r, p, out, out_dtype, false); }

void kerple_bias_add(Recorder& r, const KerpleParams& p, const Buffer& logits, DType logits_dtype) {
  detail::family_bias(r, p, logits, logits_dtype, true);
}

template BiasPlan::BiasPlan(Context& ctx, const KerpleParams& envelope, DType dtype, bool add);

}  // namespace relpos
