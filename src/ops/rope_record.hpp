#pragma once
// RoPE's recording, shared by rope()/rope_into() and RopePlan.
#include "relpos/buffer.hpp"
#include "relpos/recorder.hpp"
#include "relpos/rope.hpp"

namespace relpos::detail {

class DescriptorSource;

// What a plan lends: the frequency table's device buffer (written by vkCmdUpdateBuffer each step)
// and descriptor sets. prepare_only: create the step's pipeline and record nothing (x, out and
// positions only say in place or not and positions or not; their sizes are not checked).
struct RopePlanResources {
  const Buffer* frequencies = nullptr;
  DescriptorSource* sets = nullptr;
  bool prepare_only = false;
};

// Checks, then records the rotation of x (in place when out is null or x).
void record_rope(Recorder& r, const RopeParams& p, const Buffer& x, const Buffer* out, DType dtype, const Buffer* positions,
                 const RopePlanResources& plan);

}  // namespace relpos::detail
