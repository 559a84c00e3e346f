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

void Device::free_sets(SetCache& sets) {
  for (auto pool : sets.pools) vk.vkDestroyDescriptorPool(device, pool, nullptr);
  sets = SetCache{};
}

void Device::free_resources(RecordingResources& r) {
  free_sets(r.sets);
  r.scratch.clear();
  r.scratch_uses.clear();
  if (r.query_pool) vk.vkDestroyQueryPool(device, r.query_pool, nullptr);
  r.query_pool = VK_NULL_HANDLE;
  for (auto e : r.events) vk.vkDestroyEvent(device, e, nullptr);
  r.events.clear();
  r.commands_after_last_event = false;
}

RetiredResources Device::retired_of(RecordingResources&& r, std::list<Buffer>&& spare_scratch, std::list<MemoryUse>&& spare_uses,
                                    std::vector<VkEvent>&& spare_events, VkCommandBuffer cb) {
  RetiredResources out;
  out.sets = std::move(r.sets);
  // (A compile-only context's buffers are host memory: they simply go.)
  std::size_t n = 0;
  for (Buffer& b : r.scratch) {
    const MemoryUse use = n < r.scratch_uses.size() ? r.scratch_uses[n++] : MemoryUse::Device;
    if (b.handle()) out.buffers.push_back(RuntimeAccess::take_handles(b, use));
  }
  auto use = spare_uses.begin();
  for (Buffer& b : spare_scratch) {
    const MemoryUse u = use != spare_uses.end() ? *use++ : MemoryUse::Device;
    if (b.handle()) out.buffers.push_back(RuntimeAccess::take_handles(b, u));
  }
  out.query_pool = r.query_pool;
  out.events = std::move(r.events);
  out.spare_events = std::move(spare_events);
  out.pending = r.commands_after_last_event;
  if (!out.events.empty() && !out.pending) out.finished = out.events.back();
  out.command_buffer = cb;
  r = RecordingResources{};
  return out;
}

void Device::retire(RecordingResources&& r, std::list<Buffer>&& spare_scratch, std::list<MemoryUse>&& spare_uses,
                    std::vector<VkEvent>&& spare_events, VkCommandBuffer cb) {
  RetiredResources out = retired_of(std::move(r), std::move(spare_scratch), std::move(spare_uses), std::move(spare_events), cb);
  std::lock_guard lock(retired_mutex);
  // Nothing recorded: spare at once.
  if (out.events.empty() && !out.pending) spare.push_back(std::move(out));
  else retired.push_back(std::move(out));
}

namespace {

void free_handles(Device& d, RetiredResources& r) {
  d.free_sets(r.sets);
  for (const BufferHandles& b : r.buffers) {
    d.vk.vkDestroyBuffer(d.device, b.buffer, nullptr);
    d.vk.vkFreeMemory(d.device, b.memory, nullptr);
  }
  if (r.query_pool) d.vk.vkDestroyQueryPool(d.device, r.query_pool, nullptr);
  for (auto* events : {&r.events, &r.spare_events})
    for (auto e : *events) d.vk.vkDestroyEvent(d.device, e, nullptr);
}

}  // namespace

void Device::give_back_own(OwnSpare&& s) {
  std::lock_guard lock(retired_mutex);
  own_spare.push_back(std::move(s));
}

std::optional<Device::OwnSpare> Device::take_own() {
  std::lock_guard lock(retired_mutex);
  if (own_spare.empty()) return std::nullopt;
  std::optional<OwnSpare> out = std::move(own_spare.back());
  own_spare.pop_back();
  return out;
}

void Device::free_retired(bool all, VkCommandBuffer cb) {
  std::list<RetiredResources> done;
  std::vector<OwnSpare> own;
  {
    std::lock_guard lock(retired_mutex);
    for (auto it = retired.begin(); it != retired.end();) {
      const bool finished = all || (cb && it->command_buffer == cb) ||
                            (it->finished && vk.vkGetEventStatus(device, it->finished) == VK_EVENT_SET);
      auto next = std::next(it);
      if (finished) {
        auto& to = all ? done : spare;
        to.splice(to.end(), retired, it);
      }
      it = next;
    }
    if (all) {
      done.splice(done.end(), spare);
      own.swap(own_spare);
    }
  }
  for (auto& r : done) free_handles(*this, r);
  for (OwnSpare& o : own) {
    free_handles(*this, o.resources);
    vk.vkDestroyFence(device, o.commands.fence, nullptr);
    vk.vkDestroyCommandPool(device, o.commands.pool, nullptr);
  }
}

void Device::note_release(VkCommandBuffer cb) {
  std::lock_guard lock(retired_mutex);
  released_at[cb] = ++releases;
}

std::uint64_t Device::release_count() {
  std::lock_guard lock(retired_mutex);
  return releases;
}

bool Device::released_since(VkCommandBuffer cb, std::uint64_t count) {
  std::lock_guard lock(retired_mutex);
  const auto it = released_at.find(cb);
  return it != released_at.end() && it->second > count;
}

std::optional<RetiredResources> Device::take_spare() {
  std::optional<RetiredResources> out;
  {
    std::lock_guard lock(retired_mutex);
    if (spare.empty()) return out;
    out = std::move(spare.front());
    spare.pop_front();
  }
  // Every event is host-reset (its command buffer has passed it), ready to be recorded again.
  out->spare_events.insert(out->spare_events.end(), out->events.begin(), out->events.end());
  out->events.clear();
  out->finished = VK_NULL_HANDLE;
  for (auto e : out->spare_events) vk_check(vk.vkResetEvent(device, e), "vkResetEvent");
  return out;
}

}  // namespace relpos::detail
