#ifndef RELPOS_PUSH_SHAW_MATERIALISE_H
#define RELPOS_PUSH_SHAW_MATERIALISE_H
#include "relpos_push/common.h"

// shaw_materialise.comp: E[i, j, :] = table[idx(i, j), :] for pairs (i, j) = pair0 + x.
RELPOS_PUSH_BEGIN(ShawMaterialisePush) {
  uint pairs;        // (i, j) pairs of this dispatch
  uint pair0;
  uint keys;
  uint depth;
  int query_offset;
  int max_rel;
  uint e_base;       // E window: element of the first pair
}
RELPOS_PUSH_END(ShawMaterialisePush)

#endif
