// t5_distance_row.comp: the T5 bucket (or the bias of every head) of each relative position, on
// the per-distance bias skeleton (relpos_push/distance_row.h). Buckets come from integer thresholds
// computed on the host by the CPU reference, never from shader transcendentals.
#ifndef RELPOS_PUSH_T5_H
#define RELPOS_PUSH_T5_H
#include "relpos_push/distance_row.h"

RELPOS_PUSH_BEGIN(T5RowPush) {
  RELPOS_DISTANCE_ROW_FIELDS
  uint heads;            // columns of the table
  uint bidirectional;    // 1: positive rp use the upper half of the buckets
  uint half_buckets;     // offset of the upper half (num_buckets / 2) when bidirectional
  uint max_exact;        // distances below it get a bucket each
  uint threshold_count;  // bucket = max_exact + threshold_base + #{t : thresholds[t] <= n} for n >= max_exact
  float scale;
  uint write_buckets;    // 1: write the int bucket (one row); 0: write scale * table[bucket, h] per head
  uint threshold_base;   // the level of the window's smallest distance >= max_exact (t5_window_thresholds)
}
RELPOS_PUSH_END(T5RowPush)

#endif
