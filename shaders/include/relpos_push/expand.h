// expand_distance*.comp: write (or add) a [rows, keys] tensor whose row r = (b, h, i) is the window
// of a per-distance row: value(r, j) = row[h * row_len + (queries - 1 - i) + j].
// expand_shift.comp makes the four shifted copies the whole-quad path reads:
// shifted[(h * 4 + s) * shifted_len + x] = row[h * row_len + x + s].
#ifndef RELPOS_PUSH_EXPAND_H
#define RELPOS_PUSH_EXPAND_H
#include "relpos_push/common.h"

RELPOS_PUSH_BEGIN(ExpandPush) {
  uint keys;         // K: columns of the output
  uint queries;      // Q: i = r % Q
  uint heads;        // rows of the per-distance buffer; h = (r / Q) % heads
  uint row_len;      // Q + K - 1
  uint first_row;    // row and column of this chunk's first element (expand_shift: first word)
  uint first_col;
  uint count;        // elements in this chunk (expand_shift: words to write)
  uint shifted_len;  // elements per shifted copy (a multiple of 4)
}
RELPOS_PUSH_END(ExpandPush)

#endif
