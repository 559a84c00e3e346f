// fill.comp and copy.comp: the device's write and copy ceilings, QUADS 16-byte words per invocation.
#ifndef RELPOS_CONTRACT_FILL_H
#define RELPOS_CONTRACT_FILL_H
#include "relpos_contract/common.h"

#define RELPOS_SPEC_FILL(X) \
  X(0, WG_X, size_x, 64u)   \
  X(1, QUADS, uint, 4u)
#define RELPOS_BINDINGS_FILL(X) X(0, OUT)
#define RELPOS_BINDINGS_COPY(X) \
  X(0, SRC)                     \
  X(1, DST)

#ifdef __cplusplus
RELPOS_SPEC_STRUCT(FillSpec, RELPOS_SPEC_FILL)
RELPOS_BINDINGS_STRUCT(FillBindings, RELPOS_BINDINGS_FILL)
RELPOS_BINDINGS_STRUCT(CopyBindings, RELPOS_BINDINGS_COPY)
#endif

#endif
