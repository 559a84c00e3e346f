// cos and sin of π·pos/w without a large argument ever reaching sin/cos. The host gives the
// phase step of each wavelength as the 64-bit fixed-point fraction step = 2^64 / (2w) (turns per
// position, low word first). pos·step mod 2^64 is exact integer arithmetic; its top 32 bits are
// the phase in turns with an error below 2^-32 turns, whatever |pos| < 2^31 is. The nearest
// quarter turn is split off as a quadrant, so sin and cos are only needed on |θ| <= π/4, where
// fixed minimax polynomials (Cephes' sinf/cosf kernels, a few float32 roundings: under 1e-7) give
// the same accuracy on every device: Vulkan lets a driver's sin and cos err by 2^-11, and one that
// errs by 4e-7 (NVIDIA's) would break the documented bound (sinusoidal_error_bound).
const float RELPOS_TURN_UNIT = 1.4629180792671596e-09;  // 2π / 2^32

vec2 cos_sin_of_position(int pos, uvec2 step) {
  uint n = uint(abs(pos));
  uint msb, lsb;
  umulExtended(n, step.x, msb, lsb);
  uint phase = msb + n * step.y;  // top word of n·step mod 2^64
  if (pos < 0) phase = 0u - phase;
  uint quadrant = (phase + 0x20000000u) >> 30;
  float theta = float(int(phase - (quadrant << 30))) * RELPOS_TURN_UNIT;
  float z = theta * theta;
  float s = theta + theta * z * ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1);
  float c = 1.0 - 0.5 * z + z * z * ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2);
  // Rotate by the quadrant with selects, not a branch: lanes of one SIMD group differ in it.
  vec2 v = (quadrant & 1u) != 0u ? vec2(-s, c) : vec2(c, s);
  return (quadrant & 2u) != 0u ? -v : v;
}
