// fill.comp and copy.comp: the device's write and copy ceilings, a vec4 store (and load) per quad.
#ifndef RELPOS_PUSH_FILL_H
#define RELPOS_PUSH_FILL_H
#include "relpos_push/common.h"

RELPOS_PUSH_BEGIN(FillPush) {
  uint quads;  // 16-byte words in this chunk
  uint value;  // the 32-bit pattern written (fill only)
}
RELPOS_PUSH_END(FillPush)

#endif
