#pragma once
// The attention pieces the Shaw pipeline composes (no begin_op inside the record_* functions).
#include "relpos/unfused_attention.hpp"
#include "relpos/buffer.hpp"
#include "relpos/recorder.hpp"

namespace relpos::detail {

// scale · q·kᵀ into f32 logits.
MatmulParams logits_matmul(const UnfusedAttentionParams& p);
// weights·v into out_dtype.
MatmulParams output_matmul(const UnfusedAttentionParams& p, DType out_dtype);
void check_softmax(const Recorder& r, const UnfusedAttentionParams& p, const Buffer& logits);
void record_softmax(Recorder& r, const UnfusedAttentionParams& p, const Buffer& logits);
// Sizes of the buffers given (nullptr: not checked), in p.dtype.
void check_attention_buffers(const UnfusedAttentionParams& p, const Buffer* q, const Buffer* k, const Buffer* v, const Buffer* out);

}  // namespace relpos::detail
