// The bindings of fused attention (attention_fused.glsl, attention_tiled.glsl): the same eight in
// both kernel classes, so that one host path binds either. Needs IN_HALF declared before.
// float32 storage is read as vec4 words, float16 as uvec2 words (four halves); both views alias.
layout(std430, binding = 0) readonly buffer Q32 { vec4 q32[]; };
layout(std430, binding = 0) readonly buffer Q16 { uvec2 q16[]; };
layout(std430, binding = 1) readonly buffer K32 { vec4 k32[]; };
layout(std430, binding = 1) readonly buffer K16 { uvec2 k16[]; };
layout(std430, binding = 2) readonly buffer V32 { vec4 v32[]; };
layout(std430, binding = 2) readonly buffer V16 { uvec2 v16[]; };
layout(std430, binding = 3) writeonly buffer O32 { vec4 o32[]; };
layout(std430, binding = 3) writeonly buffer O16 { uvec2 o16[]; };
layout(std430, binding = 4) writeonly buffer Lse { float lse[]; };
// Shaw has no other bias input: its rel_values take the bias binding (the runtime binds 8 at most).
layout(std430, binding = 5) readonly buffer Bias { float bias[]; };
layout(std430, binding = 5) readonly buffer RelValues { vec4 rel_values[]; };
layout(std430, binding = 6) readonly buffer RelKeys { vec4 rel_keys[]; };
layout(std430, binding = 7) readonly buffer KeyLengths { uint key_lengths[]; };

vec4 unpack4(uvec2 u) { return vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y)); }
vec4 load_q(uint w) { return IN_HALF != 0u ? unpack4(q16[w]) : q32[w]; }
vec4 load_k(uint w) { return IN_HALF != 0u ? unpack4(k16[w]) : k32[w]; }
vec4 load_v(uint w) { return IN_HALF != 0u ? unpack4(v16[w]) : v32[w]; }
