// sandwich_distance_row.comp: the Sandwich bias of every head at each relative position, on the
// per-distance bias skeleton (relpos_push/distance_row.h).
#ifndef RELPOS_PUSH_SANDWICH_H
#define RELPOS_PUSH_SANDWICH_H
#include "relpos_push/distance_row.h"

RELPOS_PUSH_BEGIN(SandwichRowPush) {
  RELPOS_DISTANCE_ROW_FIELDS
  uint terms;  // d' / 2 cosines, at most SandwichParams::kMaxDim / 2
}
RELPOS_PUSH_END(SandwichRowPush)

#endif
