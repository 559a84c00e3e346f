// KERPLE on the GPU, on the per-distance bias kit: kerple_distance_row.comp computes the rows from
// the host's r1 and r2; the kit expands or adds them; BiasPlan's steps record the same rows.
#include "ops/bias_plan_state.hpp"
#include "ops/distance_bias.hpp"
#include "ops/kerple_row.hpp"
#include "relpos/kerple.hpp"

namespace relpos {

detail::DistanceSource distance_source(Context& ctx, const KerpleParams& p, detail::OpStorage& storage) {
  std::vector<float> params = p.r1;  // [2, heads]
  params.insert(params.end(), p.r2.begin(), p.r2.end());
  return {detail::kerple_rows(ctx, p.variant), &storage.upload<float>(params, "r1, r2")};
}

namespace {
detail::RowsRecorder kerple_rows(Recorder& r, const KerpleParams& p) {
  return detail::source_rows(detail::distance_window(p), [&](detail::OpStorage& s) { return distance_source(r.context(), p, s); });
}
}  // namespace

void kerple_bias(Recorder& r, const KerpleParams& p, const Buffer& out, DType out_dtype) {
  p.validate();
  detail::distance_bias(r, detail::distance_window(p), out, out_dtype, kerple_rows(r, p));
}

void kerple_bias_add(Recorder& r, const KerpleParams& p, const Buffer& logits, DType logits_dtype) {
  p.validate();
  detail::distance_bias_add(r, detail::distance_window(p), logits, logits_dtype, kerple_rows(r, p));
}

template BiasPlan::BiasPlan(Context& ctx, const KerpleParams& envelope, DType dtype, bool add);

}  // namespace relpos
