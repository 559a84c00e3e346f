// sinusoidal.comp, fourier_distance_row.comp and fourier_direct.comp. Angles come from host-computed
// 64-bit fixed-point phase steps (relpos/fourier_phase.glsl), one per wavelength.
#ifndef RELPOS_PUSH_FOURIER_H
#define RELPOS_PUSH_FOURIER_H
#include "relpos_push/common.h"

// A shader has one push block: it defines the RELPOS_FOURIER_* of the one it uses before
// including this header; C++ sees all three.
#ifdef __cplusplus
#define RELPOS_FOURIER_SINUSOIDAL
#define RELPOS_FOURIER_ROW
#define RELPOS_FOURIER_DIRECT
#endif

#ifdef RELPOS_FOURIER_SINUSOIDAL
// The encoding [N, d] of positions pos0 .. pos0 + N - 1 over one chunk of the output.
RELPOS_PUSH_BEGIN(SinusoidalPush) {
  uint first;       // paired: first row of the chunk; flat: flat index of its first element
  uint count;       // tasks in the chunk: paired, rows * d/8 (quads of wavelengths); flat, elements
  uint first_task;  // first task of this dispatch
  uint dim;         // d
  int pos0;         // position of row 0
}
RELPOS_PUSH_END(SinusoidalPush)
#endif

#ifdef RELPOS_FOURIER_ROW
// The per-distance row [heads, row_len]: rp = rp_first + r. One dispatch covers the heads
// [first_head, first_head + head_count) and adds the terms of the features
// [first_feature, first_feature + features) of d/2.
RELPOS_PUSH_BEGIN(FourierRowPush) {
  uint row_len;        // Q + K - 1
  uint first;          // first r of this dispatch
  int rp_first;        // -(Q - 1) - query_offset
  uint first_head;
  uint head_count;
  uint first_feature;
  uint features;
  uint dim;            // d: the rotation rows are [a | b], each d/2 long
}
RELPOS_PUSH_END(FourierRowPush)
#endif

#ifdef RELPOS_FOURIER_DIRECT
// The direct path: out rows r = h * Q + i of one chunk, in blocks of 4 rows x 4 keys, summing the
// features [first_feature, first_feature + features) of d/2.
RELPOS_PUSH_BEGIN(FourierDirectPush) {
  uint first_block;  // block index of this dispatch within the chunk
  uint blocks;       // blocks in the chunk: row_blocks * key_blocks
  uint key_blocks;   // ceil(K / 4)
  uint first_row;    // first output row of the chunk
  uint rows;         // output rows in the chunk
  uint queries;
  uint keys;
  uint dim;
  uint first_feature;
  uint features;
}
RELPOS_PUSH_END(FourierDirectPush)
#endif

#endif
