#pragma once
// Recording pieces the attention and Shaw ops compose: the batched matmul and the f32 -> f16
// cast, without begin_op, so that a composite op places its own barriers.
#include <cstdint>

#include "relpos/unfused_attention.hpp"
#include "relpos/buffer.hpp"
#include "relpos/recorder.hpp"

namespace relpos::detail {

// Parameters and what the device can bind (no buffers yet); throws InvalidArgument.
void check_matmul_plan(const Recorder& r, const MatmulParams& p);
// Parameters, buffer sizes and what the device can bind; throws InvalidArgument.
void check_matmul(const Recorder& r, const MatmulParams& p, const Buffer& a, const Buffer& b, const Buffer& c);
void record_matmul(Recorder& r, const MatmulParams& p, const Buffer& a, const Buffer& b, const Buffer& c);

// out[e] (=|+=) in[e] for e in [0, count): in f32, out f16.
void record_cast_f16(Recorder& r, const Buffer& in, const Buffer& out, std::uint64_t count, bool add);

}  // namespace relpos::detail
