// cast_f16.comp: f32 -> f16, one 32-bit word of the output per invocation.
#ifndef RELPOS_CONTRACT_CAST_H
#define RELPOS_CONTRACT_CAST_H
#include "relpos_contract/common.h"

#define RELPOS_SPEC_CAST_F16(X) \
  X(0, WG_X, size_x, 64u)       \
  X(1, ADD, bool, false) /* out += in rather than out = in */
#define RELPOS_BINDINGS_CAST_F16(X) \
  X(0, IN_F32)                      \
  X(1, OUT_F16)

#ifdef __cplusplus
RELPOS_SPEC_STRUCT(CastF16Spec, RELPOS_SPEC_CAST_F16)
RELPOS_BINDINGS_STRUCT(CastF16Bindings, RELPOS_BINDINGS_CAST_F16)
#endif

#endif
