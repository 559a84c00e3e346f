#pragma once
// What every plan (AttentionPlan, BiasPlan, RopePlan) owns: device buffers made once for its
// largest step, and descriptor sets reused step after step (StepSets). Destroyed while steps may
// still be pending, it hands both to the Device, which frees them once the last step has run.
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>

#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "vk/step_sets.hpp"

namespace relpos::detail {

class PlanStorage {
 public:
  explicit PlanStorage(Context& ctx);
  ~PlanStorage();
  PlanStorage(const PlanStorage&) = delete;
  PlanStorage& operator=(const PlanStorage&) = delete;

  // A device buffer of `bytes` (the plan binds it whole): InvalidArgument naming `what` when it
  // would not fit one storage buffer binding; `advice` ends the message.
  const Buffer& make(std::uint64_t bytes, const std::string& what, const std::string& advice = "");
  // A device buffer holding `values`.
  const Buffer& upload(std::span<const float> values);
  StepSets& sets() { return *sets_; }

 private:
  Context* ctx_;
  std::list<Buffer> buffers_;  // one list, so that they can be retired at once
  std::unique_ptr<StepSets> sets_;
};

}  // namespace relpos::detail
