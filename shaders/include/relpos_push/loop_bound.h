// The one bound on shader loops, shared by the shaders and the ops that plan their dispatches.
//
// No shader invocation runs more than RELPOS_MAX_LOOP_ITERATIONS iterations of its loops in total
// (every loop that is not [[unroll]]ed, summed over the whole invocation). Work whose size grows
// with the input (keys, distances, features, the shared dimension of a matmul, parts to merge) is
// split by the host into dispatches or invocations that each stay under it, or the input is
// refused with its limit named. Why: lavapipe's LLVM back end gives each invocation one counter of
// 65,535 loop iterations for all its loops together and silently leaves every loop once it runs
// out (LP_MAX_TGSI_LOOP_ITERATIONS); GPUs kill long-running dispatches with their watchdogs. Half
// the counter leaves room for the fixed-size loops that a compiler does not unroll.
#ifndef RELPOS_PUSH_LOOP_BOUND_H
#define RELPOS_PUSH_LOOP_BOUND_H

#define RELPOS_MAX_LOOP_ITERATIONS 32768u

#endif
