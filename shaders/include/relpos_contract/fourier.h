// meliad's sinusoidal encoding (sinusoidal.comp) and Fourier bias (fourier_direct.comp;
// fourier_distance_row*.comp on shaders/include/relpos/fourier_distance_row.glsl). ACCUMULATE 1:
// a later chunk of the features adds its partial sums to the output instead of writing them.
#ifndef RELPOS_CONTRACT_FOURIER_H
#define RELPOS_CONTRACT_FOURIER_H
#include "relpos_contract/common.h"

#define RELPOS_SPEC_SINUSOIDAL(X) \
  X(0, WG_X, size_x, 64u)         \
  X(1, PAIRED, uint, 0u) /* d % 8 == 0: four wavelengths of a row per invocation */
#define RELPOS_BINDINGS_SINUSOIDAL(X) \
  X(0, STEPS)                         \
  X(1, OUT)

#define RELPOS_SPEC_FOURIER_DIRECT(X) \
  X(0, WG_X, size_x, 64u)             \
  X(1, ACCUMULATE, uint, 0u)
#define RELPOS_BINDINGS_FOURIER_DIRECT(X) \
  X(0, QUERIES)                           \
  X(1, KEYS)                              \
  X(2, ROTATION)                          \
  X(3, OUT)

#define RELPOS_SPEC_FOURIER_DISTANCE_ROW(X)                                      \
  X(0, WG_X, size_x, 64u)                                                        \
  X(1, HEADS_PER_PASS, uint, 8u) /* heads sharing one cos/sin pair */            \
  X(2, SUB, uint, 0u)            /* the subgroup size sharing loads, 0: none */  \
  X(3, ACCUMULATE, uint, 0u)
#define RELPOS_BINDINGS_FOURIER_DISTANCE_ROW(X) \
  X(0, STEPS)                                   \
  X(1, ROTATION)                                \
  X(2, ROWS)

#ifdef __cplusplus
RELPOS_SPEC_STRUCT(SinusoidalSpec, RELPOS_SPEC_SINUSOIDAL)
RELPOS_BINDINGS_STRUCT(SinusoidalBindings, RELPOS_BINDINGS_SINUSOIDAL)
RELPOS_SPEC_STRUCT(FourierDirectSpec, RELPOS_SPEC_FOURIER_DIRECT)
RELPOS_BINDINGS_STRUCT(FourierDirectBindings, RELPOS_BINDINGS_FOURIER_DIRECT)
RELPOS_SPEC_STRUCT(FourierDistanceRowSpec, RELPOS_SPEC_FOURIER_DISTANCE_ROW)
RELPOS_BINDINGS_STRUCT(FourierDistanceRowBindings, RELPOS_BINDINGS_FOURIER_DISTANCE_ROW)
#endif

#endif
