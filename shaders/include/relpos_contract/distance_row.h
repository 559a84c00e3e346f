// The per-distance bias row shaders (alibi_, kerple_, sandwich_, t5_distance_row.comp on
// shaders/include/relpos/distance_row.glsl): a workgroup size only (RELPOS_SPEC_WORKGROUP); the
// family's parameters, the rows [heads, row_len] they write, and, for some families, constants
// the host computed (T5's bucket thresholds, Sandwich's phase steps).
#ifndef RELPOS_CONTRACT_DISTANCE_ROW_H
#define RELPOS_CONTRACT_DISTANCE_ROW_H
#include "relpos_contract/common.h"

#define RELPOS_BINDINGS_DISTANCE_ROW(X) \
  X(0, PARAMS)                          \
  X(1, ROWS)
#define RELPOS_BINDINGS_DISTANCE_ROW_CONSTANTS(X) \
  RELPOS_BINDINGS_DISTANCE_ROW(X)                 \
  X(2, CONSTANTS)

#ifdef __cplusplus
RELPOS_BINDINGS_STRUCT(DistanceRowBindings, RELPOS_BINDINGS_DISTANCE_ROW)
RELPOS_BINDINGS_STRUCT(DistanceRowConstantsBindings, RELPOS_BINDINGS_DISTANCE_ROW_CONSTANTS)
#endif

#endif
