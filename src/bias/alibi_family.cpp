// ALiBi in fused attention: the kernels compute -slope[h]·|rp| from the caller's slopes.
#include <cmath>
#include <cstdlib>
#include <string>

#include "bias/bias_family.hpp"
#include "params/checks.hpp"
#include "relpos/alibi.hpp"
#include "relpos_push/attention.h"

namespace relpos::detail {

extern const BiasFamily kAlibiBias{
    .info = {.bias = AttentionBias::Alibi, .name = "alibi", .input = "float32 [heads] slopes"},
    .kernel_mode = RELPOS_ATTN_ALIBI,
    .input_elements = [](const AttentionParams& p) { return std::uint64_t{p.heads}; },
    // A slope is a parameter, not data: inf or NaN has no meaning (inf * 0 at rp = 0 is NaN).
    .check_input =
        [](const AttentionParams&, std::span<const float> in) {
          for (float m : in) require(std::isfinite(m), "slopes", std::to_string(m), "must be finite");
        },
    .bias_at = [](const AttentionParams&, std::span<const float> in, std::uint32_t h, std::uint32_t, std::uint32_t, std::int64_t rp) {
      return -(in[h] * static_cast<float>(std::abs(rp)));
    },
};

}  // namespace relpos::detail
