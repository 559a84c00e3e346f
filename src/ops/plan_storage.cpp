#include "ops/plan_storage.hpp"

#include <algorithm>

#include "params/checks.hpp"
#include "vk/access.hpp"

namespace relpos::detail {

PlanStorage::PlanStorage(Context& ctx) : ctx_(&ctx), sets_(std::make_unique<StepSets>(device_of(ctx))) {}

PlanStorage::~PlanStorage() {
  if (sets_->finished()) sets_.reset();  // then the buffers, as members
  else sets_->retire(std::move(buffers_));
}

const Buffer& PlanStorage::make(std::uint64_t bytes, const std::string& what, const std::string& advice) {
  const auto& lim = ctx_->limits();
  require(bytes <= lim.max_storage_buffer_range, what, std::to_string(bytes) + " bytes",
          "for the plan's largest step must fit one storage buffer binding (maxStorageBufferRange = " +
              std::to_string(lim.max_storage_buffer_range) + " bytes)" + (advice.empty() ? "" : "; " + advice));
  return buffers_.emplace_back(*ctx_, std::max<std::uint64_t>(bytes, 16), MemoryUse::Device);
}

const Buffer& PlanStorage::upload(std::span<const float> values) {
  Buffer& b = buffers_.emplace_back(*ctx_, std::max<std::uint64_t>(values.size_bytes(), 16), MemoryUse::Device);
  if (!values.empty()) b.upload(values.data(), values.size_bytes());
  return b;
}

}  // namespace relpos::detail
