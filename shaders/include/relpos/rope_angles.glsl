// sincos4: sin and cos of any finite float32 angle, accurate to about 1e-7 (rope.comp, kv_append.comp).
// The binary fraction of 2/pi, 32 bits a word, after one zero word: bit t_j (2^-j) is bit 31 + j
// counted from the first word's top. 224 bits cover every finite float's window below.
const uint TWO_OVER_PI_0 = 0u, TWO_OVER_PI_1 = 0xA2F9836Eu, TWO_OVER_PI_2 = 0x4E441529u, TWO_OVER_PI_3 = 0xFC2757D1u,
           TWO_OVER_PI_4 = 0xF534DDC0u, TWO_OVER_PI_5 = 0xDB629599u, TWO_OVER_PI_6 = 0x3C439041u;

// The word of five (w = 0..4) that each lane's `at` = (w == 1, w == 2, w == 3, w == 4) picks: a table
// lookup as selects, since lavapipe turns an indexed constant array into a per-lane gather, which
// made the whole op 2-3 times slower with one head per position.
uvec4 pick(bvec4 at[4], uint w0, uint w1, uint w2, uint w3, uint w4) {
  return mix(mix(mix(mix(uvec4(w0), uvec4(w1), at[0]), uvec4(w2), at[1]), uvec4(w3), at[2]), uvec4(w4), at[3]);
}

// sin and cos of any finite float32 angle, by a Payne-Hanek reduction in integers. |a| = m * 2^e
// (m the 24-bit mantissa, e = biased exponent - 150); |a| * 2/pi = k + f in quarter turns is
// m * (2/pi) * 2^e, and mod 4 with 62 fraction bits that is m * W mod 2^64 for the 64-bit window
// W = floor((2/pi) * 2^(e + 62)) mod 2^64 of 2/pi's bits (the bits above it add multiples of 2^64,
// the truncated ones less than m < 2^24 units of 2^-62): V's top two bits are the quadrant, the
// rest the fraction, within 2^-38 quarter turns (1e-11). Rounding to the nearest quadrant leaves
// |r| <= pi/4, converted to float from the magnitude so that small remainders stay accurate.
// |a| <= pi/4 skips the reduction (r = a). Taylor terms to r^11 (sin) and r^12 (cos) leave < 1e-11
// on pi/4; float32 evaluation adds about 1e-7. Selects, not branches: lanes differ in everything.
void sincos4(vec4 a, out vec4 s, out vec4 c) {
  uvec4 bits = floatBitsToUint(a);
  uvec4 m = (bits & 0x7fffffu) | 0x800000u;
  // The window starts at table bit e + 30 = biased exponent - 120 (below 0 only for |a| < 2^-7,
  // which takes r = a anyway).
  uvec4 g = uvec4(max(ivec4((bits >> 23) & 0xffu) - 120, ivec4(0)));
  uvec4 w = g >> 5u, sh = g & 31u;
  bvec4 at[4] = bvec4[](equal(w, uvec4(1u)), equal(w, uvec4(2u)), equal(w, uvec4(3u)), equal(w, uvec4(4u)));
  uvec4 t0 = pick(at, TWO_OVER_PI_0, TWO_OVER_PI_1, TWO_OVER_PI_2, TWO_OVER_PI_3, TWO_OVER_PI_4);
  uvec4 t1 = pick(at, TWO_OVER_PI_1, TWO_OVER_PI_2, TWO_OVER_PI_3, TWO_OVER_PI_4, TWO_OVER_PI_5);
  uvec4 t2 = pick(at, TWO_OVER_PI_2, TWO_OVER_PI_3, TWO_OVER_PI_4, TWO_OVER_PI_5, TWO_OVER_PI_6);
  // (t >> 1) >> (31 - sh): the next word's top sh bits, also for sh = 0 (a shift by 32 is undefined).
  uvec4 w_hi = (t0 << sh) | ((t1 >> 1u) >> (31u - sh));
  uvec4 w_lo = (t1 << sh) | ((t2 >> 1u) >> (31u - sh));
  uvec4 carry, v_lo;
  umulExtended(m, w_lo, carry, v_lo);
  uvec4 v_hi = m * w_hi + carry;  // V = m * W mod 2^64
  uvec4 k = (v_hi + 0x20000000u) >> 30u;  // the nearest quadrant: (V + 2^61) >> 62
  uvec4 d_hi = v_hi - (k << 30u);         // D = V - k * 2^62, signed, |D| <= 2^61
  bvec4 negative = greaterThanEqual(d_hi, uvec4(0x80000000u));
  uvec4 abs_lo = mix(v_lo, 0u - v_lo, negative);
  uvec4 abs_hi = mix(d_hi, ~d_hi + uvec4(equal(v_lo, uvec4(0u))), negative);
  // 2^-30 and 2^-62: |D| * 2^-62 quarter turns, word by word.
  vec4 quarters = vec4(abs_hi) * 9.313225746154785e-10 + vec4(abs_lo) * 2.168404344971009e-19;
  vec4 r = quarters * 1.5707963267948966;
  r = mix(r, -r, negative);
  bvec4 small = lessThanEqual(abs(a), vec4(0.78539816339744831));
  r = mix(r, abs(a), small);
  k = mix(k, uvec4(0u), small);
  vec4 r2 = r * r;
  vec4 sp = r + r * r2 * (-1.0 / 6.0 + r2 * (1.0 / 120.0 + r2 * (-1.0 / 5040.0 + r2 * (1.0 / 362880.0 + r2 * (-1.0 / 39916800.0)))));
  vec4 cp = 1.0 + r2 * (-0.5 + r2 * (1.0 / 24.0 + r2 * (-1.0 / 720.0 + r2 * (1.0 / 40320.0 + r2 * (-1.0 / 3628800.0 + r2 * (1.0 / 479001600.0))))));
  bvec4 swap = equal(k & 1u, uvec4(1u));
  s = mix(sp, cp, swap);
  c = mix(cp, -sp, swap);
  bvec4 half_turn = greaterThanEqual(k, uvec4(2u));
  s = mix(s, -s, half_turn);
  c = mix(c, -c, half_turn);
  s = mix(s, -s, lessThan(a, vec4(0.0)));  // sin is odd, cos even
}
