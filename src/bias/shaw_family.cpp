// Shaw et al.'s relative keys and values in fused attention: q·rel_keys[idx] joins each score and
// Σ w·rel_values[idx] the output, idx = clip(rp, -k, k) + k (docs/shaw.md).
#include <algorithm>
#include <string>

#include "bias/bias_family.hpp"
#include "params/checks.hpp"
#include "relpos_push/attention.h"

namespace relpos::detail {

extern const BiasFamily kShawBias{
    .info = {.bias = AttentionBias::Shaw, .name = "shaw", .rel_tables = true},
    .kernel_mode = RELPOS_ATTN_SHAW,
    .validate =
        [](const AttentionParams& p) {
          require(p.max_relative_position >= 1 && p.max_relative_position <= 1'000'000, "max_relative_position",
                  std::to_string(p.max_relative_position), "must be in [1, 10^6] for the Shaw bias");
        },
    // The kernels read the tables through one binding each.
    .check_device =
        [](const DeviceLimits& lim, const AttentionParams& p) {
          const std::uint64_t rel_bytes = (2ull * p.max_relative_position + 1) * p.head_dim * 4;
          require(rel_bytes <= lim.max_storage_buffer_range, "rel_keys", std::to_string(rel_bytes) + " bytes",
                  "must fit in maxStorageBufferRange = " + std::to_string(lim.max_storage_buffer_range));
        },
    .rel_row =
        [](const AttentionParams& p, std::int64_t rp) {
          const std::int64_t k = p.max_relative_position;
          return static_cast<std::uint32_t>(std::clamp(rp, -k, k) + k);
        },
};

}  // namespace relpos::detail
