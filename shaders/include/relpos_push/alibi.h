// alibi_distance_row.comp: the ALiBi bias of every head at each relative position, on the
// per-distance bias skeleton (relpos_push/distance_row.h).
#ifndef RELPOS_PUSH_ALIBI_H
#define RELPOS_PUSH_ALIBI_H
#include "relpos_push/distance_row.h"

RELPOS_PUSH_BEGIN(AlibiRowPush) {
  RELPOS_DISTANCE_ROW_FIELDS
}
RELPOS_PUSH_END(AlibiRowPush)

#endif
