#ifndef RELPOS_PUSH_CAST_H
#define RELPOS_PUSH_CAST_H
#include "relpos_push/common.h"

// cast_f16.comp: f32 -> f16 of `count` elements (the f32 window starts at element in_base,
// the f16 window at element out_base, of either parity: invocations own whole words).
RELPOS_PUSH_BEGIN(CastPush) {
  uint count;
  uint in_base;
  uint out_base;
}
RELPOS_PUSH_END(CastPush)

#endif
