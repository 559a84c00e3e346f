// ALiBi on the GPU, on the per-distance bias kit: the rows -m_h * |rp| from the host's slopes
// (alibi_distance_row.comp), expanded or added by the kit; BiasPlan's steps record the same rows.
// Fused attention computes -slope[h]·|rp| in its kernels (the family's registry entry, below).
#include <cmath>
#include <cstdlib>
#include <string>

#include "bias/bias_family.hpp"
#include "ops/bias_plan_state.hpp"
#include "ops/distance_bias.hpp"
#include "params/checks.hpp"
#include "relpos/alibi.hpp"
#include "relpos_push/alibi.h"
#include "relpos_push/attention.h"

namespace relpos {
namespace detail {

extern const BiasFamily kAlibiBias{
    .info = {.bias = AttentionBias::Alibi, .name = "alibi", .input = "float32 [heads] slopes"},
    .kernel_mode = RELPOS_ATTN_ALIBI,
    .input_shape = [](const AttentionParams& p) { return std::vector<std::uint64_t>{p.heads}; },
    // A slope is a parameter, not data: inf or NaN has no meaning (inf * 0 at rp = 0 is NaN).
    .check_input =
        [](const AttentionParams&, std::span<const float> in) {
          for (std::size_t h = 0; h < in.size(); ++h)
            require(std::isfinite(in[h]), "slopes[" + std::to_string(h) + "]", detail::number_text(in[h]), "must be finite");
        },
    .bias_at = [](const AttentionParams&, std::span<const float> in, std::uint32_t h, std::uint32_t, std::uint32_t, std::int64_t rp) {
      return -(in[h] * static_cast<float>(std::abs(rp)));
    },
};


}  // namespace detail

detail::DistanceSource distance_source(Context& ctx, const AlibiParams& p, detail::OpStorage& storage) {
  auto push = [](const detail::DistanceWindow&) { return push::AlibiRowPush{}; };
  return {std::make_unique<detail::ShaderRows<push::AlibiRowPush>>(ctx, detail::ShaderId::alibi_distance_row, push),
          &storage.upload<float>(alibi_slopes(p), "slopes")};
}

void alibi_bias(Recorder& r, const AlibiParams& p, const Buffer& out, DType out_dtype) { detail::family_bias(r, p, out, out_dtype, false); }

void alibi_bias_add(Recorder& r, const AlibiParams& p, const Buffer& logits, DType logits_dtype) {
  detail::family_bias(r, p, logits, logits_dtype, true);
}

template BiasPlan::BiasPlan(Context& ctx, const AlibiParams& envelope, DType dtype, bool add);

}  // namespace relpos
