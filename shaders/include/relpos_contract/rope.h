// rope.comp: rotary position embedding over strided rows (relpos_push/rope.h). QUAD 1: a unit is
// four pairs loaded as quads, WIDE f16 units eight; L_POSITIONS: the position changes along l;
// TAIL: units past rot_dim copy the pass-through features (out of place).
#ifndef RELPOS_CONTRACT_ROPE_H
#define RELPOS_CONTRACT_ROPE_H
#include "relpos_contract/common.h"

#define RELPOS_SPEC_ROPE(X)  \
  X(0, WG_X, size_x, 64u)    \
  X(1, WG_Y, size_y, 1u)     \
  X(2, F16, uint, 0u)        \
  X(3, GPTJ, uint, 0u)       \
  X(4, QUAD, uint, 1u)       \
  X(5, IN_PLACE, uint, 1u)   \
  X(6, WIDE, uint, 0u)       \
  X(7, L_POSITIONS, uint, 0u) \
  X(8, TAIL, uint, 0u)
#define RELPOS_BINDINGS_ROPE(X) \
  X(0, INV_FREQ)                \
  X(1, X_IN)                    \
  X(2, OUT)                     \
  X(3, POSITIONS)

#ifdef __cplusplus
RELPOS_SPEC_STRUCT(RopeSpec, RELPOS_SPEC_ROPE)
RELPOS_BINDINGS_STRUCT(RopeBindings, RELPOS_BINDINGS_ROPE)
#endif

#endif
