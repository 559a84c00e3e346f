// The matmul kernels C = alpha·A·B' (+ C): matmul.comp (any operands), matmul_shared.comp (CPU
// devices whose subgroups shuffle), matmul_tiled.comp (the GPU kernel class), all on
// shaders/include/relpos/matmul_io.glsl. C_MODE: 0 write f32, 1 write f16, 2 add f32, 3 add f16.
// B_T: B is [n][k] (A·Bᵀ) rather than [k][n].
#ifndef RELPOS_CONTRACT_MATMUL_H
#define RELPOS_CONTRACT_MATMUL_H
#include "relpos_contract/common.h"

#define RELPOS_SPEC_MATMUL(X) \
  X(0, WG_X, size_x, 64u)     \
  X(1, B_T, bool, false)      \
  X(2, A_F16, bool, false)    \
  X(3, B_F16, bool, false)    \
  X(4, C_MODE, uint, 0u)      \
  X(5, VEC4, bool, false) /* k, bases and strides are multiples of 4: quad loads */

#define RELPOS_SPEC_MATMUL_SHARED(X)                                            \
  X(0, WG_X, size_x, 64u)                                                       \
  X(1, SG, uint, 8u) /* subgroup size */                                        \
  X(2, A_F16, bool, false)                                                      \
  X(3, B_F16, bool, false)                                                      \
  X(4, C_MODE, uint, 0u)                                                        \
  X(5, RM, uint, 2u) /* rows of C per lane */                                   \
  X(6, NQ, uint, 8u) /* quads of columns per subgroup tile (NC = 4·NQ) */       \
  X(7, B_T, bool, true)

#define RELPOS_SPEC_MATMUL_TILED(X) \
  X(0, WG_X, size_x, 64u) /* 64: the lane mapping assumes it */ \
  X(1, B_T, bool, true)             \
  X(2, A_F16, bool, false)          \
  X(3, B_F16, bool, false)          \
  X(4, C_MODE, uint, 0u)

#define RELPOS_BINDINGS_MATMUL(X) \
  X(0, A)                         \
  X(1, B)                         \
  X(2, C)

// Rows of C per invocation of matmul.comp; matmul_tiled.comp's tile of C (rows × columns), by which
// the host counts workgroups.
#define RELPOS_MATMUL_ROWS 8u
#define RELPOS_MATMUL_TILED_ROWS 32u
#define RELPOS_MATMUL_TILED_COLS 32u

#ifdef __cplusplus
RELPOS_SPEC_STRUCT(MatmulSpec, RELPOS_SPEC_MATMUL)
RELPOS_SPEC_STRUCT(MatmulSharedSpec, RELPOS_SPEC_MATMUL_SHARED)
RELPOS_SPEC_STRUCT(MatmulTiledSpec, RELPOS_SPEC_MATMUL_TILED)
RELPOS_BINDINGS_STRUCT(MatmulBindings, RELPOS_BINDINGS_MATMUL)
#endif

#endif
