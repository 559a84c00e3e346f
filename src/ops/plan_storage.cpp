#include "ops/plan_storage.hpp"

#include <algorithm>
#include <utility>

#include "params/checks.hpp"
#include "vk/access.hpp"

namespace relpos::detail {

PlanStorage::PlanStorage(Context& ctx, std::string advice)
    : dev_(device_of(ctx)), advice_(std::move(advice)), sets_(std::make_unique<StepSets>(dev_)) {}

PlanStorage::~PlanStorage() {
  if (sets_->finished()) sets_.reset();  // then the buffers, as members
  else sets_->retire(std::move(buffers_));
}

const Buffer& PlanStorage::make(std::uint64_t bytes, const std::string& what) {
  const auto& lim = dev_->limits;
  require(bytes <= lim.max_storage_buffer_range, what, std::to_string(bytes) + " bytes",
          "for the plan's largest step must fit one storage buffer binding (maxStorageBufferRange = " +
              std::to_string(lim.max_storage_buffer_range) + " bytes)" + (advice_.empty() ? "" : "; " + advice_));
  return buffers_.emplace_back(RuntimeAccess::buffer(dev_, std::max<std::uint64_t>(bytes, 16), MemoryUse::Device));
}

const Buffer& PlanStorage::upload_bytes(const void* data, std::uint64_t bytes, const std::string&) {
  Buffer& b = buffers_.emplace_back(RuntimeAccess::buffer(dev_, std::max<std::uint64_t>(bytes, 16), MemoryUse::Device));
  if (bytes) b.upload(data, bytes);
  return b;
}

}  // namespace relpos::detail
