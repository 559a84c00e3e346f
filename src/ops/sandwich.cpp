// Sandwich on the GPU, on the per-distance bias kit: sandwich_distance_row.comp computes the rows
// from the scales and the host's phase steps of the d'/2 frequencies; the kit expands or adds
// them; BiasPlan's steps and fused attention (the family's registry entry, below) record the same
// rows.
#include <cmath>
#include <string>
#include <vector>

#include "bias/bias_family.hpp"
#include "ops/bias_plan_state.hpp"
#include "ops/distance_bias.hpp"
#include "params/checks.hpp"
#include "relpos/sandwich.hpp"
#include "relpos_push/attention.h"
#include "relpos_push/sandwich.h"

namespace relpos {
namespace detail {
namespace {

// Each frequency's phase step, ω_k / 2π turns per position as a 64-bit fixed-point fraction (low
// word first): rp·step mod 2^64 is the phase of any rp within 2^-33 turns (fourier_phase.glsl).
std::vector<std::uint32_t> phase_steps(std::uint32_t dim, std::uint32_t first_frequency) {
  constexpr long double kTwoPi = 6.283185307179586476925286766559005768L;
  std::vector<std::uint32_t> words;
  for (std::uint32_t k = first_frequency; k < first_frequency + dim / 2; ++k) {
    const long double turns = std::pow(10000.0L, -2.0L * k / dim) / kTwoPi;  // < 1
    const auto step = static_cast<std::uint64_t>(std::round(std::ldexp(turns, 64)));
    words.push_back(static_cast<std::uint32_t>(step));
    words.push_back(static_cast<std::uint32_t>(step >> 32));
  }
  return words;
}

// The rows of any window, the scales [heads] as their parameters.
std::unique_ptr<DistanceRows> sandwich_rows(Context& ctx, std::uint32_t dim, std::uint32_t first_frequency, OpStorage& storage) {
  const Buffer& steps = storage.upload<std::uint32_t>(phase_steps(dim, first_frequency), "phase steps");
  auto push = [dim](const DistanceWindow&) {
    push::SandwichRowPush pc{};
    pc.terms = dim / 2;
    return pc;
  };
  return std::make_unique<ShaderRows<push::SandwichRowPush>>(ctx, ShaderId::sandwich_distance_row, push, &steps);
}

}  // namespace

// Fused attention's bias input is the scales; the rows are computed from them before the kernels.
extern const BiasFamily kSandwichBias{
    .info = {.bias = AttentionBias::Sandwich, .name = "sandwich", .input = "float32 [heads] scales"},
    .kernel_mode = RELPOS_ATTN_ROW,
    .input_shape = [](const AttentionParams& p) { return std::vector<std::uint64_t>{p.heads}; },
    .validate =
        [](const AttentionParams& p) {
          require(p.sandwich_dim >= 2 && p.sandwich_dim % 2 == 0 && p.sandwich_dim <= SandwichParams::kMaxDim, "sandwich_dim",
                  std::to_string(p.sandwich_dim), "must be even, in [2, " + std::to_string(SandwichParams::kMaxDim) + "] for the Sandwich bias");
          require(p.sandwich_first_frequency <= 1, "sandwich_first_frequency", std::to_string(p.sandwich_first_frequency),
                  "must be 0 (k = 0 ... d'/2 - 1) or 1 (k = 1 ... d'/2) for the Sandwich bias");
        },
    .check_input =
        [](const AttentionParams&, std::span<const float> in) {
          for (std::size_t h = 0; h < in.size(); ++h)
            require(std::isfinite(in[h]), "scale[" + std::to_string(h) + "]", detail::number_text(in[h]), "must be finite");
        },
    .bias_at = [](const AttentionParams& p, std::span<const float> in, std::uint32_t h, std::uint32_t, std::uint32_t, std::int64_t rp) {
      return sandwich_bias_value(in[h], p.sandwich_dim, rp, p.sandwich_first_frequency);
    },
    .rows = [](Context& ctx, const AttentionParams& p, OpStorage& storage) { return sandwich_rows(ctx, p.sandwich_dim, p.sandwich_first_frequency, storage); },
};

}  // namespace detail

detail::DistanceSource distance_source(Context& ctx, const SandwichParams& p, detail::OpStorage& storage) {
  return {detail::sandwich_rows(ctx, p.dim, p.first_frequency, storage), &storage.upload<float>(p.scale, "scale")};
}

void sandwich_bias(Recorder& r, const SandwichParams& p, const Buffer& out, DType out_dtype) { detail::family_bias(r, p, out, out_dtype, false); }

void sandwich_bias_add(Recorder& r, const SandwichParams& p, const Buffer& logits, DType logits_dtype) {
  detail::family_bias(r, p, logits, logits_dtype, true);
}

template BiasPlan::BiasPlan(Context& ctx, const SandwichParams& envelope, DType dtype, bool add);

}  // namespace relpos
