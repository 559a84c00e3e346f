// How long what relpos's commands use lives: relpos's own submissions in flight, and the resources
// of recordings into an application's command buffer after their Recorder is gone.
#include "vk/access.hpp"
#include "vk/device.hpp"

namespace relpos::detail {

std::uint64_t Submissions::begin() {
  std::lock_guard lock(mutex_);
  running_.insert(next_);
  return next_++;
}

void Submissions::end(std::uint64_t ticket) {
  {
    std::lock_guard lock(mutex_);
    running_.erase(ticket);
  }
  ended_.notify_all();
}

void Submissions::wait_for_earlier() {
  std::unique_lock lock(mutex_);
  const std::uint64_t now = next_;
  ended_.wait(lock, [&] { return running_.empty() || *running_.begin() >= now; });
}

void Device::free_resources(RecordingResources& r) {
  for (auto pool : r.descriptor_pools) vk.vkDestroyDescriptorPool(device, pool, nullptr);
  r.descriptor_pools.clear();
  r.scratch.clear();
  if (r.query_pool) vk.vkDestroyQueryPool(device, r.query_pool, nullptr);
  r.query_pool = VK_NULL_HANDLE;
  for (auto e : r.events) vk.vkDestroyEvent(device, e, nullptr);
  r.events.clear();
  r.commands_after_last_event = false;
}

void Device::retire(RecordingResources&& r) {
  RetiredResources out;
  out.descriptor_pools = std::move(r.descriptor_pools);
  for (Buffer& b : r.scratch) out.buffers.push_back(RuntimeAccess::take_handles(b));  // freed with the retired entry
  out.query_pool = r.query_pool;
  out.events = std::move(r.events);
  if (!out.events.empty() && !r.commands_after_last_event) out.finished = out.events.back();
  r = RecordingResources{};
  std::lock_guard lock(retired_mutex);
  retired.push_back(std::move(out));
}

void Device::free_retired(bool all) {
  std::list<RetiredResources> done;
  {
    std::lock_guard lock(retired_mutex);
    for (auto it = retired.begin(); it != retired.end();) {
      const bool finished = all || (it->finished && vk.vkGetEventStatus(device, it->finished) == VK_EVENT_SET);
      auto next = std::next(it);
      if (finished) done.splice(done.end(), retired, it);
      it = next;
    }
  }
  for (auto& r : done) {
    for (auto pool : r.descriptor_pools) vk.vkDestroyDescriptorPool(device, pool, nullptr);
    for (auto [buffer, memory] : r.buffers) {
      vk.vkDestroyBuffer(device, buffer, nullptr);
      vk.vkFreeMemory(device, memory, nullptr);
    }
    if (r.query_pool) vk.vkDestroyQueryPool(device, r.query_pool, nullptr);
    for (auto e : r.events) vk.vkDestroyEvent(device, e, nullptr);
  }
}

}  // namespace relpos::detail
