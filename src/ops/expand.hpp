#pragma once
// The expansion every per-distance bias shares (T5, ALiBi, Fourier): a bias that depends on
// rp = j - i_abs only is one row of Q + K - 1 values per head, and output row r = (b, h, i) is that
// row's window starting at Q - 1 - i. expand_distance() writes or adds the [rows, K] tensor,
// split into chunks the device can bind and dispatch.
#include <cstdint>

#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/dtype.hpp"
#include "relpos/recorder.hpp"

namespace relpos::detail {

enum class ExpandMode : std::uint32_t { Copy32 = 0, WriteF16 = 1, AddF32 = 2, AddF16 = 3 };

struct ExpandShape {
  std::uint32_t queries = 0;
  std::uint32_t keys = 0;
  std::uint32_t heads = 1;  // rows of the per-distance buffer, cycled through by r / queries
  std::uint64_t rows = 0;   // output rows: batch * heads * queries
};

class DescriptorSource;

// What a plan lends an expansion so that it allocates nothing: a buffer for the shifted copies of
// the rows (at least expand_scratch_bytes() of the largest shape) and descriptor sets.
struct ExpandResources {
  const Buffer* shifted = nullptr;
  DescriptorSource* sets = nullptr;
};

// The checks expand_distance() makes of the output: call them before recording anything else.
void check_expand(Recorder& r, const ExpandShape& shape, const Buffer& out, ExpandMode mode);

// Write (mode Copy32 for f32 or i32 outputs, WriteF16) or add (AddF32, AddF16) the expansion of
// `distance_rows` ([heads, Q + K - 1], 32-bit values) into `out`. Checks out's size.
void expand_distance(Recorder& r, const ExpandShape& shape, const Buffer& distance_rows, const Buffer& out, ExpandMode mode,
                     const ExpandResources& res = {});
// Bytes of shifted copies an expansion of this shape (or a smaller one) may need.
std::uint64_t expand_scratch_bytes(const ExpandShape& largest);
// Creates every pipeline an expansion in `mode` may use on this context's device.
void prepare_expand_pipelines(Context& ctx, ExpandMode mode);

// The mode that writes (or adds into) a tensor of `dtype`.
ExpandMode expand_mode(DType dtype, bool add);
// Bytes per output element of a mode: 2 for the f16 modes, else 4.
std::uint32_t expand_elem_bytes(ExpandMode mode);

}  // namespace relpos::detail
