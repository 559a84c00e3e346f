// masked_softmax.comp: row softmax of f32 logits in place with the causal and key-padding masks,
// in chunks (PASS 0: one chunk per row; 1: each chunk's statistics; 2: the chunks normalised).
#ifndef RELPOS_CONTRACT_SOFTMAX_H
#define RELPOS_CONTRACT_SOFTMAX_H
#include "relpos_contract/common.h"

#define RELPOS_SPEC_MASKED_SOFTMAX(X) \
  X(0, WG_X, size_x, 64u)             \
  X(1, VEC4, bool, false)             \
  X(2, PASS, uint, 0u)
#define RELPOS_BINDINGS_MASKED_SOFTMAX(X) \
  X(0, LOGITS)                            \
  X(1, KEY_LENGTHS)                       \
  X(2, STATS)

#ifdef __cplusplus
RELPOS_SPEC_STRUCT(MaskedSoftmaxSpec, RELPOS_SPEC_MASKED_SOFTMAX)
RELPOS_BINDINGS_STRUCT(MaskedSoftmaxBindings, RELPOS_BINDINGS_MASKED_SOFTMAX)
#endif

#endif
