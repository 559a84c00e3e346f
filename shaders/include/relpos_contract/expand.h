// The expansion of per-distance rows into a [rows, keys] tensor (expand_distance.comp,
// expand_distance_rows.comp) and the shifted copies of the rows the second reads
// (expand_shift.comp). MODE: 0 copy 32-bit values, 1 write f16, 2 add into f32, 3 add into f16.
#ifndef RELPOS_CONTRACT_EXPAND_H
#define RELPOS_CONTRACT_EXPAND_H
#include "relpos_contract/common.h"

#define RELPOS_SPEC_EXPAND_DISTANCE(X) \
  X(0, WG_X, size_x, 64u)              \
  X(1, MODE, uint, 0u)                 \
  X(2, QUADS, uint, 4u) /* quads per invocation */
#define RELPOS_BINDINGS_EXPAND_DISTANCE(X) \
  X(0, ROWS)                               \
  X(1, OUT)

// A workgroup is VEC rows (WG_Y = VEC) of WG_X invocations: one per diagonal class of a tile.
#define RELPOS_SPEC_EXPAND_DISTANCE_ROWS(X)    \
  X(0, WG_X, size_x, 64u)                      \
  X(1, MODE, uint, 0u)                         \
  X(2, DIAG, uint, 16u)                        \
  X(3, VEC, uint, 4u) /* 8 for the f16 modes */ \
  X(4, UNROLL, uint, 2u)                       \
  X(5, WG_Y, size_y, 4u)
#define RELPOS_BINDINGS_EXPAND_DISTANCE_ROWS(X) \
  X(0, SHIFTED)                                 \
  X(1, OUT)

#define RELPOS_SPEC_EXPAND_SHIFT(X) \
  X(0, WG_X, size_x, 64u)           \
  X(1, HALF, uint, 0u)              \
  X(2, VEC, uint, 4u) /* copies: elements per 16-byte output vector */
#define RELPOS_BINDINGS_EXPAND_SHIFT(X) \
  X(0, ROWS)                            \
  X(1, SHIFTED)

#ifdef __cplusplus
RELPOS_SPEC_STRUCT(ExpandDistanceSpec, RELPOS_SPEC_EXPAND_DISTANCE)
RELPOS_BINDINGS_STRUCT(ExpandDistanceBindings, RELPOS_BINDINGS_EXPAND_DISTANCE)
RELPOS_SPEC_STRUCT(ExpandDistanceRowsSpec, RELPOS_SPEC_EXPAND_DISTANCE_ROWS)
RELPOS_BINDINGS_STRUCT(ExpandDistanceRowsBindings, RELPOS_BINDINGS_EXPAND_DISTANCE_ROWS)
RELPOS_SPEC_STRUCT(ExpandShiftSpec, RELPOS_SPEC_EXPAND_SHIFT)
RELPOS_BINDINGS_STRUCT(ExpandShiftBindings, RELPOS_BINDINGS_EXPAND_SHIFT)
#endif

#endif
