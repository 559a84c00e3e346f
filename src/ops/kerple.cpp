// KERPLE on the GPU, on the per-distance bias kit: kerple_distance_row.comp computes the rows from
// the host's r1 and r2; the kit expands or adds them.
#include "ops/distance_bias.hpp"
#include "ops/kerple_row.hpp"
#include "relpos/kerple.hpp"
#include "relpos_push/kerple.h"

namespace relpos {

namespace {

detail::RowsRecorder kerple_rows(const KerpleParams& p) {
  return [&p](Recorder& r) -> const Buffer& {
    std::vector<float> params = p.r1;  // [2, heads]
    params.insert(params.end(), p.r2.begin(), p.r2.end());
    return detail::kerple_distance_rows(r, detail::distance_window(p), p.variant, detail::upload_floats(r, params));
  };
}

}  // namespace

void kerple_bias(Recorder& r, const KerpleParams& p, const Buffer& out, DType out_dtype) {
  p.validate();
  detail::distance_bias(r, detail::distance_window(p), out, out_dtype, kerple_rows(p));
}

void kerple_bias_add(Recorder& r, const KerpleParams& p, const Buffer& logits, DType logits_dtype) {
  p.validate();
  detail::distance_bias_add(r, detail::distance_window(p), logits, logits_dtype, kerple_rows(p));
}

}  // namespace relpos
