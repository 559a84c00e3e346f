// T5 in fused attention: its per-distance rows (scale · table[bucket(rp), h]) computed from the
// caller's table before the kernels read them, the buckets from host thresholds of each window.
#include "bias/bias_family.hpp"
#include "ops/t5_row.hpp"
#include "relpos/t5.hpp"
#include "relpos_push/attention.h"

namespace relpos::detail {

extern const BiasFamily kT5Bias{
    .info = {.bias = AttentionBias::T5, .name = "t5", .input = "float32 [num_buckets, heads]"},
    .kernel_mode = RELPOS_ATTN_ROW,
    .input_elements = [](const AttentionParams& p) { return std::uint64_t{p.t5.num_buckets} * p.heads; },
    .validate = [](const AttentionParams& p) { p.t5_row_params().validate(); },
    .check_device = [](const DeviceLimits& lim, const AttentionParams& p) { require_t5_table_binding(lim, p.t5_row_params()); },
    .bias_at = [](const AttentionParams& p, std::span<const float> in, std::uint32_t h, std::uint32_t, std::uint32_t, std::int64_t rp) {
      return p.t5.scale * in[static_cast<std::size_t>(t5_bucket(rp, p.t5)) * p.heads + h];
    },
    .rows = [](Context& ctx, const AttentionParams& envelope, OpStorage& storage) { return t5_rows(ctx, envelope.t5_row_params(), storage); },
    .add_to_logits =
        [](Recorder& r, const AttentionParams& p, const Buffer& table, const Buffer& logits) {
          T5Params t5 = p.t5_row_params();
          t5.batch = p.batch;
          t5_bias_add(r, t5, table, logits, DType::F32);
        },
};

}  // namespace relpos::detail
