// kerple_distance_row.comp: the KERPLE bias of every head at each relative position, on the
// per-distance bias skeleton (relpos_push/distance_row.h).
#ifndef RELPOS_PUSH_KERPLE_H
#define RELPOS_PUSH_KERPLE_H
#include "relpos_push/distance_row.h"

#define RELPOS_KERPLE_LOG 0u
#define RELPOS_KERPLE_POWER 1u

RELPOS_PUSH_BEGIN(KerpleRowPush) {
  RELPOS_DISTANCE_ROW_FIELDS
  uint heads;    // r1 is params[h], r2 is params[heads + h]
  uint variant;  // RELPOS_KERPLE_LOG or RELPOS_KERPLE_POWER
}
RELPOS_PUSH_END(KerpleRowPush)

#endif
