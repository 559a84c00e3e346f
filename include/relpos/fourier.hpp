#pragma once
// meliad's sinusoidal absolute position encoding and the Fourier relative position bias built on
// it (docs/fourier.md). CPU references (float64, rounded once to float32) and GPU operations share
// SinusoidalParams / FourierParams.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "relpos/dtype.hpp"

namespace relpos {

class Buffer;
class Recorder;

// meliad `position_encoding(positions, dim, offset, max_wavelength)`, its `dim` being the Fourier
// bias's vector_size: row k encodes position k + offset as [cos(π·pos/w_p) for p < vector_size/2,
// sin(π·pos/w_p) for p < vector_size/2].
struct SinusoidalParams {
  std::uint32_t positions = 0;  // N
  std::uint32_t vector_size = 0;  // d, even
  std::int64_t offset = 0;      // rows encode positions offset .. offset + N - 1
  double max_wavelength = 0.0;  // W, the longest half-wavelength; 0: meliad's default 2N

  double wavelength() const { return max_wavelength == 0.0 ? 2.0 * positions : max_wavelength; }
  // Throws InvalidArgument for an odd or zero vector_size, W <= 1, no positions, positions outside
  // +-(2^31 - 2) or more than 2^32 - 1 output elements.
  void validate() const;
};

// meliad `RelativeFourierPositions`: bias[h, i, j] = Σ_p a[h,p]·cos(π·rp/w_p) + b[h,p]·sin(π·rp/w_p)
// with rp = j - (i + query_offset) and the rotation [heads, vector_size] = [a | b].
struct FourierParams {
  std::uint32_t heads = 1;
  std::uint32_t queries = 0;
  std::uint32_t keys = 0;
  std::uint32_t vector_size = 128;  // position_vector_size d, even
  std::uint32_t max_keys = 1024;    // max_number_of_keys: the wavelengths reach W = 2 * max_keys
  // Query i sits at absolute position i + query_offset. Unset: meliad's default keys - queries
  // (the last query lines up with the last key), which needs keys >= queries.
  std::optional<std::int64_t> query_offset;
  std::uint32_t batch = 1;  // leading dimension of the logits (in-place add)

  double wavelength() const { return 2.0 * max_keys; }
  std::int64_t offset() const { return query_offset ? *query_offset : std::int64_t{keys} - queries; }
  std::uint32_t row_len() const { return queries + keys - 1; }
  void validate() const;
};

// How fourier_bias computes on the GPU.
enum class FourierPath {
  Direct,    // meliad's einsum: rotate the query encodings, dot them with every key encoding
  Distance,  // one row of Q + K - 1 values per head (the bias depends on rp only), then expanded
};

// ---- CPU reference ------------------------------------------------------------------------

// The vector_size/2 half-wavelengths w_p = W^(p / (vector_size/2)), in float32 as meliad computes them: the
// exponent p / (vector_size/2) and the power are each rounded to float32. Every reference and shader
// uses exactly these values.
std::vector<float> fourier_wavelengths(std::uint32_t vector_size, double max_wavelength);

// float32 [N, d]: the encoding evaluated in float64 (exact angle π·pos/w_p), rounded once.
std::vector<float> sinusoidal_reference(const SinusoidalParams& p);
// float32 [N, d] the way meliad's NumPy code evaluates it: angle = float32(pos) · float32(π / w_p)
// in float32, then sin/cos of that float32 angle. Its error grows with the position; kept to
// measure how far meliad's own numbers are from exact.
std::vector<float> sinusoidal_float32_reference(const SinusoidalParams& p);

// meliad's initial rotation [heads, d]: a = 2/d, b = 0.
std::vector<float> fourier_default_rotation(const FourierParams& p);

// float32 [heads, Q + K - 1]: the bias of rp = r - (Q - 1) - query_offset, r in [0, Q + K - 1),
// from the closed form in float64.
std::vector<float> fourier_distance_row_reference(const FourierParams& p, std::span<const float> rotation);
// float32 [heads, Q, K] from the closed form in float64.
std::vector<float> fourier_bias_reference(const FourierParams& p, std::span<const float> rotation);
// float32 [heads, Q, K] by meliad's algorithm in float64: encodings of the absolute positions,
// rotated queries, d-long dot products. Equals the closed form up to float64 rounding; O(HQKd).
std::vector<float> fourier_bias_einsum_reference(const FourierParams& p, std::span<const float> rotation);
// logits [batch, heads, Q, K] += bias (sum in float64, rounded once).
void fourier_bias_add_reference(const FourierParams& p, std::span<const float> rotation, std::span<float> logits);

// ---- error bounds of the GPU operations (derivation in docs/fourier.md) ----------------------

// Absolute error of one GPU sinusoidal value against the float64 reference: 3.5e-7 at any position.
double sinusoidal_error_bound();
// Absolute error of a GPU Fourier bias value against the float64 reference, for this rotation and
// path (the worst case over heads).
double fourier_error_bound(const FourierParams& p, std::span<const float> rotation, FourierPath path);

// ---- GPU operations -----------------------------------------------------------------------
// Record into `r`; nothing runs until it is submitted. Parameters and buffer sizes are checked
// first (InvalidArgument). The rotation buffer is float32 [heads, vector_size].

// out: float32 [N, d].
void sinusoidal(Recorder& r, const SinusoidalParams& p, const Buffer& out);

// row_out: float32 [heads, Q + K - 1], the per-distance row that expand-style consumers (the T5
// expansion, fused attention) take.
void fourier_distance_row(Recorder& r, const FourierParams& p, const Buffer& rotation, const Buffer& row_out);

// out: [heads, Q, K] of out_dtype (F32 or F16; the direct path writes F32 only).
void fourier_bias(Recorder& r, const FourierParams& p, const Buffer& rotation, const Buffer& out,
                  FourierPath path = FourierPath::Distance, DType out_dtype = DType::F32);
// logits [batch, heads, Q, K] of logits_dtype (F32 or F16) += bias, through the per-distance path.
void fourier_bias_add(Recorder& r, const FourierParams& p, const Buffer& rotation, const Buffer& logits,
                      DType logits_dtype = DType::F32);

}  // namespace relpos
