// The sinusoidal encoding and the Fourier bias on the GPU. Angles are never formed in floating
// point: each wavelength's phase step (turns per position) is a 64-bit fixed-point fraction made
// here, and the shaders reduce pos·step modulo one turn with integer arithmetic.
#include <cmath>
#include <cstring>
#include <string>

#include "ops/distance_bias.hpp"
#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/fourier.hpp"
#include "relpos_contract/fourier.h"
#include "relpos_push/fourier.h"
#include "relpos_push/loop_bound.h"
#include "ops/planner.hpp"
#include "vk/dispatch.hpp"
#include "vk/access.hpp"

namespace relpos {
namespace {

constexpr std::uint32_t kGroup = 64;
constexpr std::uint32_t kHeadsPerPass = 8;  // heads sharing one cos/sin pair in fourier_distance_row
// Features (of d/2) per dispatch of the row and direct kernels: a power of two, so that chunks
// are whole blocks of any subgroup's shuffles, and with the shuffles' block loop (at most 1.5x
// the features) still under RELPOS_MAX_LOOP_ITERATIONS. Every d up to 32768 takes one chunk; the
// same chunks with and without shuffles, so both kernels sum the same terms in the same order.
constexpr std::uint32_t kFeaturesPerDispatch = 16384;
static_assert(kFeaturesPerDispatch * 3 / 2 + 5 * kHeadsPerPass + 1 <= RELPOS_MAX_LOOP_ITERATIONS);

// Loop iterations one invocation of fourier_distance_row.glsl runs over `passes` passes of
// kHeadsPerPass heads and `features` features: per pass, the feature loop (with shared loads, a
// loop over blocks of `sub` and `sub` shuffles in each), the stores (heads x 4 distances) and the
// pass itself.
std::uint64_t row_loop_iterations(std::uint64_t passes, std::uint32_t features, std::uint32_t sub) {
  const std::uint64_t feature_loop = sub == 0 ? features : std::uint64_t{detail::div_up(features, sub)} * (sub + 1);
  return passes * (feature_loop + kHeadsPerPass * (1 + 4) + 1);
}

// The chunks [first, first + count) of the d/2 features, one dispatch (or set of dispatches) each.
template <class F>
void for_each_feature_chunk(std::uint32_t half_dim, F&& f) {
  for (std::uint32_t first = 0; first < half_dim; first += kFeaturesPerDispatch)
    f(first, std::min(kFeaturesPerDispatch, half_dim - first));
}

// round(2^64 / (2w)) for every float32 half-wavelength w >= 1, correctly rounded: w = m·2^(ex-24)
// with an integer 24-bit m, so the step is 2^(87 - ex) / m, found by exact binary long division
// (the remainder stays below m < 2^24; the quotient is at most 2^63 since w >= 1).
std::vector<std::uint32_t> phase_steps(std::uint32_t dim, double max_wavelength) {
  const auto w = fourier_wavelengths(dim, max_wavelength);
  std::vector<std::uint32_t> steps;
  steps.reserve(w.size() * 2);
  for (float wl : w) {
    int ex = 0;
    const double f = std::frexp(static_cast<double>(wl), &ex);
    const auto m = static_cast<std::uint64_t>(std::ldexp(f, 24));
    std::uint64_t step = 0;
    if (87 - ex >= 0) {
      std::uint64_t rem = 1;  // 2^0, m >= 2^23 > 1
      for (int bit = 0; bit < 87 - ex; ++bit) {
        rem <<= 1;
        step = (step << 1) | (rem >= m ? 1u : 0u);
        if (rem >= m) rem -= m;
      }
      if (2 * rem >= m) ++step;
    }
    steps.push_back(static_cast<std::uint32_t>(step));
    steps.push_back(static_cast<std::uint32_t>(step >> 32));
  }
  return steps;
}

const Buffer& upload_steps(Recorder& r, std::uint32_t dim, double max_wavelength) {
  const auto steps = phase_steps(dim, max_wavelength);
  Buffer& buf = detail::scratch(r, steps.size() * 4, MemoryUse::Host);
  std::memcpy(buf.host_pointer(), steps.data(), steps.size() * 4);  // fresh: no GPU work uses it yet
  return buf;
}

// `count` float32 values of the product `what` read through one binding.
void require_fits_binding(const Recorder& r, std::uint64_t count, const std::string& what) {
  detail::require_binding(r.context().limits(), count, what);
}

void check_rotation_buffer(const FourierParams& p, const Buffer& rotation) {
  const std::uint64_t need = std::uint64_t{p.heads} * p.vector_size * 4;
  detail::require(rotation.size() == need, "rotation buffer", std::to_string(rotation.size()) + " bytes",
                  "must be float32 [heads, vector_size] = [" + std::to_string(p.heads) + ", " + std::to_string(p.vector_size) +
                      "] = " + std::to_string(need) + " bytes");
}

void record_encoding(Recorder& r, const SinusoidalParams& p, const Buffer& out) {
  const auto& lim = r.context().limits();
  const Buffer& steps = upload_steps(r, p.vector_size, p.wavelength());
  push::SinusoidalPush pc{};
  pc.dim = p.vector_size;
  pc.pos0 = static_cast<std::int32_t>(p.offset);
  // Paired quads: chunks of whole rows at bindable offsets.
  const std::uint64_t row_bytes = std::uint64_t{p.vector_size} * 4;
  const std::uint64_t rows_per_chunk = detail::whole_rows_per_chunk(lim, row_bytes);
  if (p.vector_size % 8 == 0 && rows_per_chunk > 0) {
    for (std::uint64_t first = 0; first < p.positions; first += rows_per_chunk) {
      const std::uint64_t rows = std::min<std::uint64_t>(rows_per_chunk, p.positions - first);
      pc.first = static_cast<std::uint32_t>(first);
      pc.count = static_cast<std::uint32_t>(rows * (p.vector_size / 8));
      detail::for_each_group_range(lim, detail::div_up(pc.count, kGroup), [&](std::uint64_t g, std::uint32_t groups) {
        pc.first_task = static_cast<std::uint32_t>(g * kGroup);
        detail::dispatch(r, detail::ShaderId::sinusoidal, contract::SinusoidalSpec{.WG_X = kGroup, .PAIRED = 1},
                         contract::SinusoidalBindings{.STEPS = {&steps}, .OUT = {&out, first * row_bytes, rows * row_bytes}}, pc, groups);
      });
    }
    return;
  }
  const std::uint64_t total = std::uint64_t{p.positions} * p.vector_size;
  for (const detail::ElementChunk& c : detail::element_chunks(lim, total, 4, kGroup)) {
    pc.first = static_cast<std::uint32_t>(c.first);
    pc.count = static_cast<std::uint32_t>(c.count);
    pc.first_task = 0;
    detail::dispatch(r, detail::ShaderId::sinusoidal, contract::SinusoidalSpec{.WG_X = kGroup, .PAIRED = 0},
                     contract::SinusoidalBindings{.STEPS = {&steps}, .OUT = {&out, c.first * 4, c.count * 4}}, pc, detail::div_up(c.count, kGroup));
  }
}

void check_row_output(const Recorder& r, const FourierParams& p, const Buffer& row) {
  const std::uint64_t need = std::uint64_t{p.row_len()} * p.heads * 4;
  detail::require(row.size() >= need, "row buffer", std::to_string(row.size()) + " bytes",
                  "must hold float32 [heads, queries + keys - 1] = " + std::to_string(need) + " bytes");
  require_fits_binding(r, need / 4, "heads * (queries + keys - 1)");
}

void record_row(Recorder& r, const FourierParams& p, const Buffer& rotation, const Buffer& row) {
  const Buffer& steps = upload_steps(r, p.vector_size, p.wavelength());
  push::FourierRowPush pc{};
  pc.row_len = p.row_len();
  pc.rp_first = static_cast<std::int32_t>(-(std::int64_t{p.queries} - 1) - p.offset());
  pc.dim = p.vector_size;
  const std::uint64_t bytes = std::uint64_t{p.row_len()} * p.heads * 4;
  // Where loads are worth sharing, the lanes of a subgroup share the rotation values.
  const std::uint32_t sub = detail::load_sharing_subgroup(r.context(), kGroup);
  const bool share = sub != 0;
  const std::uint32_t half_dim = p.vector_size / 2;
  // As many head passes per invocation as the loop bound leaves room for beside one feature
  // chunk (d = 128: 2300-2500 heads); the heads beyond take further dispatches.
  const std::uint32_t features = std::min(kFeaturesPerDispatch, half_dim);
  const std::uint64_t passes = RELPOS_MAX_LOOP_ITERATIONS / row_loop_iterations(1, features, sub);
  const std::uint64_t heads_per_dispatch = passes * kHeadsPerPass;
  // Features are summed chunk after chunk: the first chunk writes, each later one adds to what
  // the previous one wrote (after a barrier).
  for_each_feature_chunk(half_dim, [&](std::uint32_t first_feature, std::uint32_t count) {
    if (first_feature > 0) detail::barrier(r);
    pc.first_feature = first_feature;
    pc.features = count;
    const std::uint32_t accumulate = first_feature > 0 ? 1 : 0;
    for (std::uint64_t h0 = 0; h0 < p.heads; h0 += heads_per_dispatch) {
      pc.first_head = static_cast<std::uint32_t>(h0);
      pc.head_count = static_cast<std::uint32_t>(std::min<std::uint64_t>(heads_per_dispatch, p.heads - h0));
      // Four distances per invocation.
      detail::for_each_group_range(r.context().limits(), detail::div_up(pc.row_len, 4 * kGroup), [&](std::uint64_t first, std::uint32_t groups) {
        pc.first = static_cast<std::uint32_t>(first * 4 * kGroup);
        detail::dispatch(r, share ? detail::ShaderId::fourier_distance_row_shuffle : detail::ShaderId::fourier_distance_row,
                         contract::FourierDistanceRowSpec{.WG_X = kGroup, .HEADS_PER_PASS = kHeadsPerPass, .SUB = sub, .ACCUMULATE = accumulate},
                         contract::FourierDistanceRowBindings{.STEPS = {&steps}, .ROTATION = {&rotation}, .ROWS = {&row, 0, bytes}}, pc, groups);
      });
    }
  });
}

// The direct path: encodings of the keys and of the absolute query positions, then 4x4 blocks of
// dot products over chunks of whole output rows that one binding can hold, summed over chunks of
// the features (the first writes, later ones add after a barrier).
void record_direct(Recorder& r, const FourierParams& p, const Buffer& rotation, const Buffer& out) {
  const auto& lim = r.context().limits();
  const std::uint64_t row_bytes = std::uint64_t{p.keys} * 4;
  const std::uint64_t rows_per_chunk = detail::whole_rows_per_chunk(lim, row_bytes);
  detail::require(rows_per_chunk > 0, "keys", std::to_string(p.keys), "a direct-path output row must fit one storage buffer binding");

  SinusoidalParams ks{p.keys, p.vector_size, 0, p.wavelength()};
  SinusoidalParams qs{p.queries, p.vector_size, p.offset(), p.wavelength()};
  Buffer& kbuf = detail::scratch(r, std::uint64_t{p.keys} * p.vector_size * 4, MemoryUse::Device);
  Buffer& qbuf = detail::scratch(r, std::uint64_t{p.queries} * p.vector_size * 4, MemoryUse::Device);
  record_encoding(r, ks, kbuf);
  record_encoding(r, qs, qbuf);
  detail::barrier(r);

  const std::uint64_t rows = std::uint64_t{p.heads} * p.queries;
  push::FourierDirectPush pc{};
  pc.key_blocks = detail::div_up(p.keys, 4);
  pc.queries = p.queries;
  pc.keys = p.keys;
  pc.dim = p.vector_size;
  for_each_feature_chunk(p.vector_size / 2, [&](std::uint32_t first_feature, std::uint32_t count) {
    if (first_feature > 0) detail::barrier(r);
    pc.first_feature = first_feature;
    pc.features = count;
    const std::uint32_t accumulate = first_feature > 0 ? 1 : 0;
    for (std::uint64_t first = 0; first < rows; first += rows_per_chunk) {
      const std::uint64_t n = std::min(rows_per_chunk, rows - first);
      pc.first_row = static_cast<std::uint32_t>(first);
      pc.rows = static_cast<std::uint32_t>(n);
      pc.blocks = detail::div_up(n, 4) * pc.key_blocks;
      detail::for_each_group_range(lim, detail::div_up(pc.blocks, kGroup), [&](std::uint64_t g, std::uint32_t groups) {
        pc.first_block = static_cast<std::uint32_t>(g * kGroup);
        detail::dispatch(r, detail::ShaderId::fourier_direct, contract::FourierDirectSpec{.WG_X = kGroup, .ACCUMULATE = accumulate},
                         contract::FourierDirectBindings{
                             .QUERIES = {&qbuf}, .KEYS = {&kbuf}, .ROTATION = {&rotation}, .OUT = {&out, first * row_bytes, n * row_bytes}},
                         pc, groups);
      });
    }
  });
}

void check_common(const Recorder& r, const FourierParams& p, const Buffer& rotation) {
  p.validate();
  check_rotation_buffer(p, rotation);
  require_fits_binding(r, rotation.size() / 4, "heads * vector_size");
}

detail::DistanceWindow window_of(const FourierParams& p) { return {p.heads, p.queries, p.keys, p.offset(), p.batch, false}; }

// The per-distance path on the kit: Fourier's own row passes (features in chunks), then the kit's
// expansion (write or add).
detail::RowsRecorder fourier_rows(const FourierParams& p, const Buffer& rotation) {
  return [&](Recorder& r) -> const Buffer& {
    Buffer& row = detail::scratch(r, std::uint64_t{p.row_len()} * p.heads * 4, MemoryUse::Device);
    record_row(r, p, rotation, row);
    detail::barrier(r);
    return row;
  };
}

}  // namespace

void sinusoidal(Recorder& r, const SinusoidalParams& p, const Buffer& out) {
  p.validate();
  const std::uint64_t need = std::uint64_t{p.positions} * p.vector_size * 4;
  detail::require(out.size() >= need, "output buffer", std::to_string(out.size()) + " bytes",
                  "must hold float32 [positions, dim] = " + std::to_string(need) + " bytes");
  const auto op = detail::begin_op(r);
  record_encoding(r, p, out);
}

void fourier_distance_row(Recorder& r, const FourierParams& p, const Buffer& rotation, const Buffer& row_out) {
  check_common(r, p, rotation);
  check_row_output(r, p, row_out);
  detail::require_own_buffers(r, {{&rotation, "rotation buffer"}, {&row_out, "row_out buffer", true}});
  const auto op = detail::begin_op(r);
  record_row(r, p, rotation, row_out);
}

void fourier_bias(Recorder& r, const FourierParams& p, const Buffer& rotation, const Buffer& out, FourierPath path, DType out_dtype) {
  check_common(r, p, rotation);
  detail::require_one_of(path, {FourierPath::Direct, FourierPath::Distance}, "path", "must be Direct or Distance");
  detail::require_f32_or_f16(out_dtype, "out_dtype");
  if (path == FourierPath::Direct) {
    detail::require(out_dtype == DType::F32, "out_dtype", std::string(dtype_name(out_dtype)), "the direct path writes f32 only");
    const std::uint64_t need = std::uint64_t{p.heads} * p.queries * p.keys * 4;
    detail::require(out.size() >= need, "output buffer", std::to_string(out.size()) + " bytes",
                    "must hold float32 [heads, queries, keys] = " + std::to_string(need) + " bytes");
    for (std::uint32_t n : {p.keys, p.queries})
      require_fits_binding(r, std::uint64_t{n} * p.vector_size, "positions * vector_size (direct path)");
    // Several dispatches read the rotation and write out: checked before the first.
    detail::require_own_buffers(r, {{&rotation, "rotation buffer"}, {&out, "out buffer", true}});
    const auto op = detail::begin_op(r);
    record_direct(r, p, rotation, out);
    return;
  }
  detail::distance_bias(r, window_of(p), out, out_dtype, fourier_rows(p, rotation), {&rotation, "rotation buffer"});
}

void fourier_bias_add(Recorder& r, const FourierParams& p, const Buffer& rotation, const Buffer& logits, DType logits_dtype) {
  check_common(r, p, rotation);
  detail::distance_bias_add(r, window_of(p), logits, logits_dtype, fourier_rows(p, rotation), {&rotation, "rotation buffer"});
}

}  // namespace relpos
