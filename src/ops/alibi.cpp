// ALiBi on the GPU, on the per-distance bias kit: the rows -m_h * |rp| from the host's slopes
// (alibi_distance_row.comp), expanded or added by the kit.
#include "ops/distance_bias.hpp"
#include "relpos/alibi.hpp"
#include "relpos_push/alibi.h"

namespace relpos {
namespace {


detail::RowsRecorder alibi_rows(const AlibiParams& p) {
  return [&p](Recorder& r) -> const Buffer& {
    const std::vector<float> slopes = alibi_slopes(p);
    return detail::record_distance_rows(r, detail::distance_window(p), detail::ShaderId::alibi_distance_row, push::AlibiRowPush{}, {&detail::upload_floats(r, slopes)});
  };
}

}  // namespace

void alibi_bias(Recorder& r, const AlibiParams& p, const Buffer& out, DType out_dtype) {
  p.validate();
  detail::distance_bias(r, detail::distance_window(p), out, out_dtype, alibi_rows(p));
}

void alibi_bias_add(Recorder& r, const AlibiParams& p, const Buffer& logits, DType logits_dtype) {
  p.validate();
  detail::distance_bias_add(r, detail::distance_window(p), logits, logits_dtype, alibi_rows(p));
}

}  // namespace relpos
