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
#include "ops/op_storage.hpp"
#include "vk/step_sets.hpp"

namespace relpos::detail {

class PlanStorage final : public OpStorage {
 public:
  // `advice` ends the message of a buffer too large for one binding.
  explicit PlanStorage(Context& ctx, std::string advice = "");
  ~PlanStorage();
  PlanStorage(const PlanStorage&) = delete;
  PlanStorage& operator=(const PlanStorage&) = delete;

  // A device buffer of `bytes` (the plan binds it whole): InvalidArgument naming `what` when it
  // would not fit one storage buffer binding.
  const Buffer& make(std::uint64_t bytes, const std::string& what) override;
  // A device buffer holding the bytes.
  const Buffer& upload_bytes(const void* data, std::uint64_t bytes, const std::string& what) override;
  StepSets& sets() { return *sets_; }

 private:
  std::shared_ptr<Device> dev_;  // (not the Context, which may move)
  std::string advice_;
  std::list<Buffer> buffers_;  // one list, so that they can be retired at once
  std::unique_ptr<StepSets> sets_;
};

}  // namespace relpos::detail
