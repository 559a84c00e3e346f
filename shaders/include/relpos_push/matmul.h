// matmul.comp: C = alpha·A·B' (+ C) on strided operands, each bound as a window of its buffer;
// *_base is the element index of the dispatch's first batch and row inside that window.
#ifndef RELPOS_PUSH_MATMUL_H
#define RELPOS_PUSH_MATMUL_H
#include "relpos_push/common.h"

RELPOS_PUSH_BEGIN(MatmulPush) {
  uint m;         // rows of this dispatch (from the window's first row)
  uint n;
  uint k;
  uint tile_n0;   // first column tile of this dispatch
  uint a_base;
  uint a_bs;      // batch strides (elements), for gl_WorkGroupID.z
  uint a_rs;      // row strides (elements)
  uint b_base;
  uint b_bs;
  uint b_rs;
  uint c_base;
  uint c_bs;
  uint c_rs;
  float alpha;
  uint tx;        // invocations of a workgroup across columns (4 columns each)
  uint ty;        // and across rows; tx * ty <= 64
}
RELPOS_PUSH_END(MatmulPush)

#endif
