// ALiBi on the GPU, on the per-distance bias kit: the rows -m_h * |rp| from the host's slopes
// (alibi_distance_row.comp), expanded or added by the kit; BiasPlan's steps record the same rows.
#include "ops/bias_plan_state.hpp"
#include "ops/distance_bias.hpp"
#include "relpos/alibi.hpp"
#include "relpos_push/alibi.h"

namespace relpos {

detail::DistanceSource distance_source(Context& ctx, const AlibiParams& p, detail::OpStorage& storage) {
  auto push = [](const detail::DistanceWindow&) { return push::AlibiRowPush{}; };
  return {std::make_unique<detail::ShaderRows<push::AlibiRowPush>>(ctx, detail::ShaderId::alibi_distance_row, push),
          &storage.upload<float>(alibi_slopes(p), "slopes")};
}

namespace {
detail::RowsRecorder alibi_rows(Recorder& r, const AlibiParams& p) {
  return detail::source_rows(detail::distance_window(p), [&](detail::OpStorage& s) { return distance_source(r.context(), p, s); });
}
}  // namespace

void alibi_bias(Recorder& r, const AlibiParams& p, const Buffer& out, DType out_dtype) {
  p.validate();
  detail::distance_bias(r, detail::distance_window(p), out, out_dtype, alibi_rows(r, p));
}

void alibi_bias_add(Recorder& r, const AlibiParams& p, const Buffer& logits, DType logits_dtype) {
  p.validate();
  detail::distance_bias_add(r, detail::distance_window(p), logits, logits_dtype, alibi_rows(r, p));
}

template BiasPlan::BiasPlan(Context& ctx, const AlibiParams& envelope, DType dtype, bool add);

}  // namespace relpos
