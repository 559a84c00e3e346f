// The KV cache formats (relpos/cache_format.hpp): decoders and encoders bit for bit as the host's,
// reading and writing a cache through 32-bit words (no 8- or 16-bit storage features needed).
// A row (one block slot and kv head) is head_dim values starting at byte `row_byte` of the cache:
//   CACHE_F32       head_dim float32          CACHE_F16 / CACHE_BF16  head_dim 16-bit values
//   CACHE_Q8_0      head_dim / 32 blocks of 34 bytes: binary16 d, then 32 int8 q; value d * q
//   CACHE_FP8_E4M3  head_dim bytes, OCP E4M3FN; value e4m3(byte) * scale (the kv head's)
// f32, f16 and bf16 rows start on a word (head_dim even); q8_0 and fp8 rows may start 2 bytes
// into one.
//
// Reading: RELPOS_CACHE_READER(NAME, BUF), BUF a `uint BUF[]` storage buffer, defines
//   vec4 NAME##_decode4(uint fmt, uint row_byte, uint d4, float scale)  values 4*d4 .. 4*d4+3
//   vec2 NAME##_decode2(uint fmt, uint row_byte, uint d2, float scale)  values 2*d2, 2*d2+1
// (decode4 needs 4*d4 + 3 < head_dim; fmt a specialisation constant folds the switch away).
// Writing: RELPOS_CACHE_WRITER(NAME, BUF) defines
//   void NAME##_store(uint at, uint bits, uint count)  count (1..4) bytes of `bits`, little-endian,
//     at byte `at`; a word the bytes cover whole is stored, one they share with another row is
//     changed by atomicAnd/atomicOr of their bits only (rows of other invocations may share it).
// and the encoders below give the bits: cache_encode_f16/bf16/fp8 and q8_0's q8_block_scale, q8_inverse, q8_encode4.
#ifndef RELPOS_CACHE_FORMAT_GLSL
#define RELPOS_CACHE_FORMAT_GLSL

const uint CACHE_F32 = 0u, CACHE_F16 = 1u, CACHE_BF16 = 2u, CACHE_Q8_0 = 3u, CACHE_FP8_E4M3 = 4u;

uint cache_row_bytes(uint fmt, uint head_dim) {
  if (fmt == CACHE_F32) return head_dim * 4u;
  if (fmt == CACHE_F16 || fmt == CACHE_BF16) return head_dim * 2u;
  if (fmt == CACHE_Q8_0) return head_dim / 32u * 34u;
  return head_dim;
}

// ---- scalar codecs -----------------------------------------------------------------------------
float cache_decode_f16(uint h) { return unpackHalf2x16(h & 0xffffu).x; }  // exact
// float32 -> binary16, round-to-nearest-even (packHalf2x16's rounding is the driver's choice).
uint cache_encode_f16(float x) {
  const uint u = floatBitsToUint(x);
  const uint sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504 (inf too)
  if (a < 0x38800000u) return sign | uint(roundEven(uintBitsToFloat(a) * 16777216.0));  // subnormal: exact scaling
  const uint h = (a - 0x38000000u) >> 13, dropped = a & 0x1fffu;
  return sign | (h + ((dropped > 0x1000u || (dropped == 0x1000u && (h & 1u) != 0u)) ? 1u : 0u));
}
float cache_decode_bf16(uint b) { return uintBitsToFloat((b & 0xffffu) << 16); }
uint cache_encode_bf16(float x) {
  const uint u = floatBitsToUint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
// Two e4m3 bytes (b0 in bits 0-7, b1 in bits 8-15) as the bits of two binary16 (low half b0) of
// their values times 2^-8: each byte is a binary16 with 3 fewer exponent bits and 7 fewer mantissa
// bits, so its bits moved into a binary16's (sign to bit 15, exponent and mantissa to bits 7-13)
// give the value times 2^-8, subnormals included, exactly. NaN (0x7f, 0xff) by setting the
// exponent's bits: the magnitude 0x7f plus one carries into bit 7 of its byte, which times 0xf8 is
// 0x7c00, so 0x3f80 becomes 0x7f80, a NaN. A few integer operations per pair and no select (the
// attention kernels decode every key this way).
uint cache_fp8x2_half_bits(uint b) {
  const uint t = (b & 0xffu) | ((b & 0xff00u) << 8);  // byte i at bits 16i .. 16i + 7
  const uint mag = t & 0x007f007fu;
  return ((t & 0x00800080u) << 8) | (mag << 7) | (((mag + 0x00010001u) & 0x00800080u) * 0xf8u);
}
vec2 cache_decode_fp8x2(uint b) { return unpackHalf2x16(cache_fp8x2_half_bits(b)) * 256.0; }
// Saturating to +-448, round-to-nearest-even, NaN kept.
uint cache_encode_fp8(float x) {
  const uint u = floatBitsToUint(x);
  const uint sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7fu;
  if (a >= 0x43e00000u) return sign | 0x7eu;  // 448
  if (a < 0x3c800000u) return sign | uint(roundEven(uintBitsToFloat(a) * 512.0));
  return sign | (((a + 0x7ffffu + ((a >> 20) & 1u)) >> 20) - 960u);
}
// a / b rounded to nearest even, for finite a >= 0 and b > 0, by long division of the
// significands. Vulkan lets a shader's division be 2.5 ulp off and its fma a rounded multiply then
// a rounded add (lavapipe's is), so neither gives ggml's d and 1 / d exactly; a d or 1 / d one ulp
// off moves x * id across a rounding tie (x = amax / 2: 63.5).
float div_rn(float a, float b) {
  const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
  if (a == 0.0 || ua >= 0x7f800000u || ub >= 0x7f800000u || !(b > 0.0)) return a / b;
  // a / b = (ma / mb) * 2^e, ma and mb integers in [2^23, 2^24) (subnormals normalised)
  int ea = int(ua >> 23), eb = int(ub >> 23);
  uint ma = ua & 0x7fffffu, mb = ub & 0x7fffffu;
  if (ea == 0) { const int s = 23 - findMSB(ma); ma <<= s; ea = 1 - s; } else ma |= 0x800000u;
  if (eb == 0) { const int s = 23 - findMSB(mb); mb <<= s; eb = 1 - s; } else mb |= 0x800000u;
  int e = ea - eb;
  if (ma < mb) { ma <<= 1; e -= 1; }  // ma / mb in [1, 2)
  // 25 bits of the quotient (in [2^24, 2^25)): 24 and the rounding bit; rem != 0: more below
  uint q = 0u, rem = ma;
  for (uint i = 0u; i < 25u; ++i) {
    const bool ge = rem >= mb;
    q = (q << 1) | (ge ? 1u : 0u);
    rem = (ge ? rem - mb : rem) << 1;
  }
  const int biased = e + 127;
  const int shift = biased < 1 ? min(2 - biased, 26) : 1;  // a subnormal result keeps fewer bits
  const uint kept = q >> shift, dropped = q & ((1u << shift) - 1u), midpoint = 1u << (shift - 1);
  const bool up = dropped > midpoint || (dropped == midpoint && (rem != 0u || (kept & 1u) != 0u));
  const uint m = kept + (up ? 1u : 0u);
  if (biased >= 255) return uintBitsToFloat(0x7f800000u);
  if (biased < 1) return uintBitsToFloat(m);
  return uintBitsToFloat((uint(biased) << 23) + m - 0x800000u);  // a carry of m moves the exponent
}
// ggml's quantize_row_q8_0: d = amax / 127 and id = d ? 1 / d : 0, each rounded once; q = roundf(x * id).
// A block holding a NaN has d = NaN, one holding an infinity d = +inf, and both q = 0: every value
// decodes to NaN (the host's encode_cache_row; ggml leaves them to its max's operand order and an
// undefined conversion). NaN is found by its bits: a shader's max and float-to-int conversion of
// NaN are undefined.
bool q8_is_nan(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }
// One value's part of the block's amax (NaN: none; the block's d is NaN, q8_block_scale).
float q8_magnitude(float x) { return q8_is_nan(x) ? 0.0 : abs(x); }
float q8_block_scale(float amax, bool any_nan) { return any_nan ? uintBitsToFloat(0x7fc00000u) : div_rn(amax, 127.0); }
// id = 1 / d for a normal d; 0 for d zero, subnormal (its inverse may overflow; tested by its bits,
// which a device that flushes subnormals keeps) or not finite.
float q8_inverse(float d) {
  const uint e = floatBitsToUint(d) & 0x7f800000u;
  return e == 0u || e == 0x7f800000u ? 0.0 : div_rn(1.0, d);
}
// Four int8 of x * id, rounded half away from zero, as the bytes of one word (NaN products: 0).
uint q8_encode4(vec4 x, float id) {
  precise vec4 p = x * id;
  // A NaN product (d not finite: id = 0) stores 0: a NaN's conversion to an int is undefined.
  const vec4 y = mix(p, vec4(0.0), greaterThan(floatBitsToUint(p) & uvec4(0x7fffffffu), uvec4(0x7f800000u)));
  const vec4 t = trunc(y);
  const vec4 r = t + sign(y) * vec4(greaterThanEqual(abs(y - t), vec4(0.5)));
  const ivec4 q = clamp(ivec4(r), ivec4(-128), ivec4(127));
  return uint(q.x & 0xff) | (uint(q.y & 0xff) << 8) | (uint(q.z & 0xff) << 16) | (uint(q.w & 0xff) << 24);
}
float q8_value(uint bytes, uint i) { return float(int(bytes << (24u - 8u * i)) >> 24); }

// ---- reading and writing through words ---------------------------------------------------------
#define RELPOS_CACHE_READER(NAME, BUF)                                                              \
  uint NAME##_load4(uint at) {                                                                      \
    const uint w = at >> 2, sh = (at & 3u) * 8u;                                                    \
    return sh == 0u ? BUF[w] : (BUF[w] >> sh) | (BUF[w + 1u] << (32u - sh));                        \
  }                                                                                                 \
  uint NAME##_load2(uint at) { return (BUF[at >> 2] >> ((at & 2u) * 8u)) & 0xffffu; }                \
  vec2 NAME##_decode2(uint fmt, uint row_byte, uint d2, float scale) {                              \
    if (fmt == CACHE_F32) {                                                                         \
      const uint w = (row_byte >> 2) + 2u * d2;                                                     \
      return vec2(uintBitsToFloat(BUF[w]), uintBitsToFloat(BUF[w + 1u]));                           \
    }                                                                                               \
    if (fmt == CACHE_F16) return unpackHalf2x16(BUF[(row_byte >> 2) + d2]);                         \
    if (fmt == CACHE_BF16) {                                                                        \
      const uint w = BUF[(row_byte >> 2) + d2];                                                     \
      return vec2(uintBitsToFloat(w << 16), uintBitsToFloat(w & 0xffff0000u));                      \
    }                                                                                               \
    if (fmt == CACHE_Q8_0) {                                                                        \
      const uint blk = row_byte + (d2 >> 4) * 34u;                                                  \
      const float d = cache_decode_f16(NAME##_load2(blk));                                          \
      const uint q = NAME##_load2(blk + 2u + (d2 & 15u) * 2u);                                      \
      return d * vec2(q8_value(q, 0u), q8_value(q, 1u));                                            \
    }                                                                                               \
    const uint b = NAME##_load2(row_byte + 2u * d2);                                                \
    return cache_decode_fp8x2(b) * scale;                                                            \
  }                                                                                                 \
  vec4 NAME##_decode4(uint fmt, uint row_byte, uint d4, float scale) {                              \
    if (fmt == CACHE_F32) {                                                                         \
      const uint w = (row_byte >> 2) + 4u * d4;                                                     \
      return uintBitsToFloat(uvec4(BUF[w], BUF[w + 1u], BUF[w + 2u], BUF[w + 3u]));                 \
    }                                                                                               \
    if (fmt == CACHE_F16) {                                                                         \
      const uint w = (row_byte >> 2) + 2u * d4;                                                     \
      return vec4(unpackHalf2x16(BUF[w]), unpackHalf2x16(BUF[w + 1u]));                             \
    }                                                                                               \
    if (fmt == CACHE_BF16) {                                                                        \
      const uint w = (row_byte >> 2) + 2u * d4;                                                     \
      const uint a = BUF[w], b = BUF[w + 1u];                                                       \
      return uintBitsToFloat(uvec4(a << 16, a & 0xffff0000u, b << 16, b & 0xffff0000u));            \
    }                                                                                               \
    if (fmt == CACHE_Q8_0) {                                                                        \
      const uint blk = row_byte + (d4 >> 3) * 34u;                                                  \
      const float d = cache_decode_f16(NAME##_load2(blk));                                          \
      const uint q = NAME##_load4(blk + 2u + (d4 & 7u) * 4u);                                       \
      return d * vec4(q8_value(q, 0u), q8_value(q, 1u), q8_value(q, 2u), q8_value(q, 3u));          \
    }                                                                                               \
    const uint b = NAME##_load4(row_byte + 4u * d4);                                                \
    return vec4(cache_decode_fp8x2(b & 0xffffu), cache_decode_fp8x2(b >> 16)) * scale;              \
  }

#define RELPOS_CACHE_WRITER(NAME, BUF)                                                              \
  void NAME##_store_word(uint w, uint bits, uint mask) {                                            \
    if (mask == 0xffffffffu) {                                                                      \
      BUF[w] = bits;                                                                                \
    } else if (mask != 0u) {                                                                        \
      atomicAnd(BUF[w], ~mask);                                                                     \
      atomicOr(BUF[w], bits & mask);                                                                \
    }                                                                                               \
  }                                                                                                 \
  void NAME##_store(uint at, uint bits, uint count) {                                               \
    const uint w = at >> 2, sh = (at & 3u) * 8u;                                                    \
    const uint mask = count >= 4u ? 0xffffffffu : (1u << (8u * count)) - 1u;                        \
    NAME##_store_word(w, bits << sh, mask << sh);                                                   \
    if (sh != 0u) NAME##_store_word(w + 1u, bits >> (32u - sh), mask >> (32u - sh));                \
  }

#endif
