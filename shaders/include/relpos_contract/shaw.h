// Shaw's relative attention outside fused attention: shaw_buckets.comp (a row's weights bucketed by
// index), shaw_gather_add.comp (logits += the relative-key term) and shaw_materialise.comp
// (tensor2tensor's materialised embeddings, the benchmark baseline). VEC4: quad loads.
#ifndef RELPOS_CONTRACT_SHAW_H
#define RELPOS_CONTRACT_SHAW_H
#include "relpos_contract/common.h"

#define RELPOS_SPEC_SHAW_BUCKETS(X) \
  X(0, WG_X, size_x, 64u)           \
  X(1, VEC4, bool, false)           \
  X(2, PASS, uint, 0u)
#define RELPOS_BINDINGS_SHAW_BUCKETS(X) \
  X(0, WEIGHTS)                         \
  X(1, S)                               \
  X(2, PARTIAL)

#define RELPOS_SPEC_SHAW_GATHER_ADD(X)                                           \
  X(0, WG_X, size_x, 64u)                                                        \
  X(1, VEC4, bool, false)                                                        \
  X(2, UNROLL, uint, 4u)  /* neighbouring quads per lane (broadcast pass) */     \
  X(3, ADD, bool, true)   /* false: write the term instead of adding it */       \
  X(4, BAND, bool, false)                                                        \
  X(5, ROWS, uint, 16u)   /* rows per workgroup (broadcast pass) */
#define RELPOS_BINDINGS_SHAW_GATHER_ADD(X) \
  X(0, LOGITS)                             \
  X(1, P)

#define RELPOS_SPEC_SHAW_MATERIALISE(X) \
  X(0, WG_X, size_x, 64u)               \
  X(1, VEC4, bool, false)
#define RELPOS_BINDINGS_SHAW_MATERIALISE(X) \
  X(0, TABLE)                               \
  X(1, E)

#ifdef __cplusplus
RELPOS_SPEC_STRUCT(ShawBucketsSpec, RELPOS_SPEC_SHAW_BUCKETS)
RELPOS_BINDINGS_STRUCT(ShawBucketsBindings, RELPOS_BINDINGS_SHAW_BUCKETS)
RELPOS_SPEC_STRUCT(ShawGatherAddSpec, RELPOS_SPEC_SHAW_GATHER_ADD)
RELPOS_BINDINGS_STRUCT(ShawGatherAddBindings, RELPOS_BINDINGS_SHAW_GATHER_ADD)
RELPOS_SPEC_STRUCT(ShawMaterialiseSpec, RELPOS_SPEC_SHAW_MATERIALISE)
RELPOS_BINDINGS_STRUCT(ShawMaterialiseBindings, RELPOS_BINDINGS_SHAW_MATERIALISE)
#endif

#endif
