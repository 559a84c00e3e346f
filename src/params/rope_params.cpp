// RopeParams: the checks, and the rotary frequencies of a configuration with its scaling (HuggingFace
// transformers' modeling_rope_utils.py, computed in double).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#include "params/checks.hpp"
#include "relpos/rope.hpp"

namespace relpos {
namespace {

using detail::require;

// Positions are int32 (a position buffer's type); they are converted to float32 before the
// multiply, as HuggingFace does, which rounds those beyond 2^24.
constexpr std::int64_t kMaxPosition = std::numeric_limits<std::int32_t>::max();

void require_finite(double v, const char* name, bool ok, const std::string& limit) {
  require(std::isfinite(v) && ok, name, detail::number_text(v), limit);
}

void validate_scaling(const RopeScalingParams& s, std::uint32_t d) {
  // Any other value would leave rope_frequencies' table empty, which the GPU reads past.
  detail::require_one_of(s.type,
                         {RopeScaling::None, RopeScaling::Linear, RopeScaling::DynamicNtk, RopeScaling::Yarn, RopeScaling::Llama3,
                          RopeScaling::LongRope},
                         "scaling.type", "must be None, Linear, DynamicNtk, Yarn, Llama3 or LongRope");
  if (s.type == RopeScaling::None) return;
  require_finite(s.factor, "scaling.factor", s.factor >= 1.0, "must be finite and >= 1");
  if (s.type == RopeScaling::Linear) return;  // positions / factor: nothing else is read
  if (s.type == RopeScaling::Yarn || s.type == RopeScaling::LongRope)
    require_finite(s.attention_factor, "scaling.attention_factor", s.attention_factor >= 0.0, "must be finite and >= 0 (0: default)");
  // LongRoPE's default attention factor divides by ln(original_max_position).
  if (s.type == RopeScaling::LongRope && s.attention_factor == 0.0 && s.factor != 1.0)
    require(s.original_max_position >= 2, "scaling.original_max_position", std::to_string(s.original_max_position),
            "must be >= 2 for LongRoPE's default attention factor sqrt(1 + ln(factor) / ln(original_max_position)) (or give attention_factor)");
  require(s.original_max_position >= 1, "scaling.original_max_position", std::to_string(s.original_max_position),
          "must be >= 1 for dynamic NTK, YaRN, Llama 3 and LongRoPE scaling");
  if (s.type == RopeScaling::DynamicNtk) {
    require(d >= 4, "rotary_dim", std::to_string(d), "must be >= 4 for dynamic NTK scaling (exponent d / (d - 2))");
  } else if (s.type == RopeScaling::Yarn) {
    require_finite(s.beta_fast, "scaling.beta_fast", s.beta_fast > 0.0, "must be finite and > 0");
    require_finite(s.beta_slow, "scaling.beta_slow", s.beta_slow > 0.0, "must be finite and > 0");
    // The ramp runs from beta_fast rotations (kept) down to beta_slow (interpolated): reversed, it
    // interpolated the high frequencies and kept the low (HuggingFace warns of the same).
    require(s.beta_fast >= s.beta_slow, "scaling.beta_fast", detail::number_text(s.beta_fast),
            "must be >= beta_slow = " + detail::number_text(s.beta_slow) + " (YaRN interpolates from beta_fast rotations down to beta_slow)");
    require_finite(s.mscale, "scaling.mscale", s.mscale >= 0.0, "must be finite and >= 0");
    require_finite(s.mscale_all_dim, "scaling.mscale_all_dim", s.mscale_all_dim >= 0.0, "must be finite and >= 0");
  } else if (s.type == RopeScaling::LongRope) {
    for (const auto& [factors, name] : {std::pair{&s.long_factor, "scaling.long_factor"}, std::pair{&s.short_factor, "scaling.short_factor"}}) {
      require(factors->size() == d / 2, name, std::to_string(factors->size()) + " values",
              "must hold rotary_dim / 2 = " + std::to_string(d / 2) + " (one per rotated pair)");
      // inv_freq = base^(-2p/d) / factor <= 2^64, so that an int32 position times it stays a finite
      // float32 angle (< 2^95); a smaller factor overflowed the angle, which the reference turns
      // into NaN and the shader's range reduction does not.
      for (std::size_t p = 0; p < factors->size(); ++p)
        if (const float v = (*factors)[p]; !(std::isfinite(v) && v >= 0x1p-64f))  // the name built only for the message
          require_finite(v, (std::string(name) + "[" + std::to_string(p) + "]").c_str(), false,
                         "must be finite and >= 2^-64 (position / factor must stay a finite float32 angle)");
    }
  } else {
    require_finite(s.low_freq_factor, "scaling.low_freq_factor", s.low_freq_factor > 0.0, "must be finite and > 0");
    require_finite(s.high_freq_factor, "scaling.high_freq_factor", s.high_freq_factor > s.low_freq_factor,
                   "must be finite and > low_freq_factor = " + detail::number_text(s.low_freq_factor));
  }
}

// base^(-2p/d), p < d/2.
std::vector<double> default_inv_freq(double base, std::uint32_t d) {
  std::vector<double> f(d / 2);
  for (std::uint32_t p = 0; p < d / 2; ++p) f[p] = 1.0 / std::pow(base, 2.0 * p / d);
  return f;
}

double yarn_mscale(double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

// _compute_yarn_parameters: a ramp between extrapolated (original) and interpolated (/ factor)
// frequencies over the dimensions whose wavelengths fall between beta_fast and beta_slow rotations.
std::vector<double> yarn_inv_freq(const RopeScalingParams& s, double base, std::uint32_t d, double& attention) {
  if (s.attention_factor > 0.0) attention = s.attention_factor;
  else if (s.mscale > 0.0 && s.mscale_all_dim > 0.0) attention = yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  else attention = yarn_mscale(s.factor, 1.0);
  auto correction_dim = [&](double rotations) {
    return d * std::log(s.original_max_position / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(d - 1));
  if (low == high) high += 0.001;  // HuggingFace's guard against a zero-width ramp
  std::vector<double> f = default_inv_freq(base, d);
  for (std::uint32_t p = 0; p < d / 2; ++p) {
    const double ramp = std::clamp((p - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1.0 - ramp;
    f[p] = f[p] / s.factor * (1.0 - extrapolation) + f[p] * extrapolation;
  }
  return f;
}

// _compute_llama3_parameters: long wavelengths divided by factor, short ones kept, a smooth
// interpolation between.
std::vector<double> llama3_inv_freq(const RopeScalingParams& s, double base, std::uint32_t d) {
  const double old_ctx = s.original_max_position;
  const double low_wavelen = old_ctx / s.low_freq_factor, high_wavelen = old_ctx / s.high_freq_factor;
  std::vector<double> f = default_inv_freq(base, d);
  for (double& x : f) {
    const double wavelen = 2.0 * std::numbers::pi / x;
    if (wavelen > low_wavelen) {
      x = x / s.factor;
    } else if (!(wavelen < high_wavelen)) {
      const double smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      x = (1.0 - smooth) * x / s.factor + smooth * x;
    }
  }
  return f;
}

// _compute_longrope_parameters: the searched per-pair factors, long or short by the sequence
// length, and an attention factor from the context's extension.
std::vector<double> longrope_inv_freq(const RopeScalingParams& s, double len, double base, std::uint32_t d, double& attention) {
  const std::vector<float>& ext = len > s.original_max_position ? s.long_factor : s.short_factor;
  if (s.attention_factor > 0.0) attention = s.attention_factor;
  else if (s.factor > 1.0) attention = std::sqrt(1.0 + std::log(s.factor) / std::log(static_cast<double>(s.original_max_position)));
  std::vector<double> f = default_inv_freq(base, d);
  for (std::uint32_t p = 0; p < d / 2; ++p) f[p] /= ext[p];
  return f;
}

// The sequence length the length-dependent scalings read: scaling.seq_len, or the last position
// + 1 where the positions are position_offset + s.
double sequence_length(const RopeParams& p, bool positions_from_buffer, const char* scaling) {
  const std::uint64_t given = p.scaling.seq_len;
  require(!(positions_from_buffer && given == 0), "scaling.seq_len", "0",
          std::string("must be given for ") + scaling + " scaling when positions come from a buffer");
  return given ? static_cast<double>(given) : static_cast<double>(p.position_offset + p.seq);
}

}  // namespace

std::uint64_t RopeParams::elements() const {
  return detail::checked_elements({batch, seq, heads, head_dim}, "batch * seq * heads * head_dim");
}

void RopeParams::validate() const {
  require(batch >= 1, "batch", std::to_string(batch), "must be >= 1");
  require(seq >= 1, "seq", std::to_string(seq), "must be >= 1");
  require(heads >= 1, "heads", std::to_string(heads), "must be >= 1");
  require(head_dim >= 2, "head_dim", std::to_string(head_dim), "must be >= 2");
  // The shader and the reference test each for one value and take the other for anything else:
  // an unknown one would pair features differently on each.
  detail::require_one_of(layout, {RopeLayout::BSHD, RopeLayout::BHSD}, "layout", "must be BSHD or BHSD");
  detail::require_one_of(style, {RopeStyle::NeoX, RopeStyle::GptJ}, "style", "must be NeoX or GptJ");
  const std::uint32_t d = rot_dim();
  require(d % 2 == 0, "rotary_dim", std::to_string(d), "must be even (features rotate in pairs)");
  require(d <= head_dim, "rotary_dim", std::to_string(d), "must be <= head_dim = " + std::to_string(head_dim));
  require(std::isfinite(base) && base > 1.0, "base", detail::number_text(base), "must be finite and > 1");
  require(position_offset >= -kMaxPosition && position_offset <= kMaxPosition - (std::int64_t{seq} - 1), "position_offset",
          std::to_string(position_offset), "puts positions position_offset + s, s < seq = " + std::to_string(seq) +
              ", outside +-(2^31 - 1) (positions are int32)");
  validate_scaling(scaling, d);
  // The shader indexes (batch, seq) and (batch, heads) rows with 32 bits.
  require(std::uint64_t{batch} * seq <= 0xffffffffull && std::uint64_t{batch} * heads <= 0xffffffffull, "batch * seq, batch * heads",
          std::to_string(std::uint64_t{batch} * std::max(seq, heads)), "must be < 2^32");
  (void)elements();
}

void RopeParams::validate(DType dtype) const {
  validate();
  detail::require_f32_or_f16(dtype, "dtype");
  require(dtype != DType::F16 || head_dim % 2 == 0, "head_dim", std::to_string(head_dim),
          "must be even for f16 storage (rows own whole 32-bit words)");
}

RopeFrequencies rope_frequencies(const RopeParams& p, bool positions_from_buffer) {
  p.validate();
  const RopeScalingParams& s = p.scaling;
  const std::uint32_t d = p.rot_dim();
  double attention = 1.0;
  std::vector<double> f;
  switch (s.type) {
    case RopeScaling::None: f = default_inv_freq(p.base, d); break;
    case RopeScaling::Linear:
      f = default_inv_freq(p.base, d);
      for (double& x : f) x /= s.factor;
      break;
    case RopeScaling::DynamicNtk: {
      const double max_pos = s.original_max_position;
      const double len = std::max(sequence_length(p, positions_from_buffer, "dynamic NTK"), max_pos);
      const double base = p.base * std::pow(s.factor * len / max_pos - (s.factor - 1.0), static_cast<double>(d) / (d - 2));
      f = default_inv_freq(base, d);
      break;
    }
    case RopeScaling::Yarn: f = yarn_inv_freq(s, p.base, d, attention); break;
    case RopeScaling::Llama3: f = llama3_inv_freq(s, p.base, d); break;
    case RopeScaling::LongRope: {
      f = longrope_inv_freq(s, sequence_length(p, positions_from_buffer, "LongRoPE"), p.base, d, attention);
      break;
    }
  }
  RopeFrequencies out;
  out.inv_freq.assign(f.begin(), f.end());
  out.attention_factor = static_cast<float>(attention);
  return out;
}

}  // namespace relpos
