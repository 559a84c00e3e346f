#include "relpos/recorder.hpp"

#include <algorithm>
#include <string>

#include "relpos/context.hpp"
#include "relpos/error.hpp"
#include "shaders/contracts.hpp"
#include "shaders/embedded.hpp"
#include "vk/access.hpp"
#include "vk/dispatch.hpp"

namespace relpos {
namespace detail {
namespace {

constexpr std::uint32_t kSetsPerPool = 256;
constexpr std::uint32_t kTimestampCapacity = 1024;

constexpr VkPipelineStageFlags kWorkStages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
constexpr VkAccessFlags kWriteAccess = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
constexpr VkAccessFlags kAllAccess =
    VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;

void memory_barrier(RecorderState& s, VkPipelineStageFlags src, VkAccessFlags src_access, VkPipelineStageFlags dst,
                    VkAccessFlags dst_access) {
  if (s.dev->tuning.compile_only) return;
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = src_access;
  mb.dstAccessMask = dst_access;
  s.dev->vk.vkCmdPipelineBarrier(s.cb, src, dst, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

// The next set of the layout: one an earlier recording took, or a new one.
VkDescriptorSet allocate_set(RecorderState& s, VkDescriptorSetLayout layout) {
  auto& c = s.resources.sets;
  auto& list = c.sets[layout];
  std::size_t& taken = c.taken[layout];
  if (taken < list.size()) return list[taken++];
  auto& d = *s.dev;
  if (c.sets_left == 0) {
    c.pools.push_back(d.create_descriptor_pool(kSetsPerPool, kMaxBindings));
    c.sets_left = kSetsPerPool;
  }
  --c.sets_left;
  list.push_back(d.allocate_descriptor_set(c.pools.back(), layout));
  ++taken;
  return list.back();
}

void begin_own(RecorderState& s) {
  s.dispatches = 0;
  if (s.dev->tuning.compile_only) return;
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  vk_check(s.dev->vk.vkBeginCommandBuffer(s.cb, &bi), "vkBeginCommandBuffer");
  s.timestamps_reset = false;
  s.next_timestamp = 0;
  s.dispatches = 0;
  s.timed.clear();
}

// After a finished submission of the recorder's own command buffer, what its commands used is
// kept for the next recording (its descriptor sets are handed out again in order), and the
// scratch the one before used and this one did not goes: a recorder that records the same work
// again and again creates nothing after the first time, and holds no more scratch than one
// recording needs. (The query pool stays too.)
void recycle_submitted(RecorderState& s) {
  for (auto& [layout, taken] : s.resources.sets.taken) taken = 0;
  if (!s.retain_spares) {
    s.spare_scratch.clear();
    s.spare_uses.clear();
  }
  // Appended: the spares' front is the least recently used. A retaining recorder lets the oldest
  // go past kRetainedSpares, never what this recording used.
  const std::size_t used = s.resources.scratch.size();
  s.spare_scratch.splice(s.spare_scratch.end(), s.resources.scratch);
  s.spare_uses.insert(s.spare_uses.end(), s.resources.scratch_uses.begin(), s.resources.scratch_uses.end());
  s.resources.scratch_uses.clear();
  constexpr std::size_t kRetainedSpares = 64;
  while (s.spare_scratch.size() > std::max(kRetainedSpares, used)) {
    s.spare_scratch.pop_front();
    s.spare_uses.pop_front();
  }
}

// Takes what a finished recording left (the Device's spares, for a recording into an
// application's command buffer; an own Recorder's, for an own Recorder): its descriptor sets,
// scratch buffers, events and query pool.
void adopt_spare(RecorderState& s, std::optional<RetiredResources>&& r) {
  if (!r) return;
  s.resources.sets = std::move(r->sets);
  for (auto& [layout, taken] : s.resources.sets.taken) taken = 0;  // handed out again in order
  for (const BufferHandles& h : r->buffers) {
    s.spare_scratch.push_back(RuntimeAccess::adopt(s.dev, h));
    s.spare_uses.push_back(h.use);
  }
  s.spare_events = std::move(r->spare_events);
  s.resources.query_pool = r->query_pool;
}

void mark_command(RecorderState& s) { s.resources.commands_after_last_event = true; }

}  // namespace

VkDescriptorPool Device::create_descriptor_pool(std::uint32_t sets, std::uint32_t bindings) {
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, sets * bindings};
  VkDescriptorPoolCreateInfo ci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  ci.maxSets = sets;
  ci.poolSizeCount = 1;
  ci.pPoolSizes = &size;
  VkDescriptorPool pool = VK_NULL_HANDLE;
  vk_check(vk.vkCreateDescriptorPool(device, &ci, nullptr, &pool), "vkCreateDescriptorPool");
  ++counters.descriptor_pools;
  return pool;
}

VkDescriptorSet Device::allocate_descriptor_set(VkDescriptorPool pool, VkDescriptorSetLayout layout) {
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = pool;
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  vk_check(vk.vkAllocateDescriptorSets(device, &ai, &set), "vkAllocateDescriptorSets");
  ++counters.descriptor_sets;
  return set;
}

RecorderState::~RecorderState() {
  if (!dev) return;
  auto& d = *dev;
  // Submitted and never waited for: the command buffer and what it uses must outlive its execution.
  bool executed = true;
  if (in_flight) {
    try {
      d.wait(fence, ticket);
    } catch (...) {  // a lost device: nothing left to wait for, and nothing to keep
      executed = false;
    }
  }
  if (external) {  // the application's command buffer may not have executed yet
    d.retire(std::move(resources), std::move(spare_scratch), std::move(spare_uses), std::move(spare_events), cb);
    return;
  }
  // Every submission of the recorder's own command buffer was waited for (what was recorded after
  // the last one never runs): the command buffer, reset, with its pool and fence, and what the last
  // recording used (the scratch earlier ones left unused goes, as after a wait) go to the next own
  // Recorder. A compile-only context, a Recorder whose construction or wait failed: freed.
  const bool keep = executed && !d.tuning.compile_only && command_pool && cb && fence &&
                    d.vk.vkResetCommandPool(d.device, command_pool, 0) == VK_SUCCESS &&
                    d.vk.vkResetFences(d.device, 1, &fence) == VK_SUCCESS;
  if (!keep) {
    d.free_resources(resources);
    for (auto e : spare_events) d.vk.vkDestroyEvent(d.device, e, nullptr);
    if (fence) d.vk.vkDestroyFence(d.device, fence, nullptr);
    if (command_pool) d.vk.vkDestroyCommandPool(d.device, command_pool, nullptr);
    return;
  }
  if (!resources.scratch.empty()) {
    spare_scratch.clear();
    spare_uses.clear();
  }
  resources.commands_after_last_event = false;
  d.give_back_own({{command_pool, cb, fence},
                   d.retired_of(std::move(resources), std::move(spare_scratch), std::move(spare_uses), std::move(spare_events), VK_NULL_HANDLE)});
}

void require_recording(const RecorderState& s) {
  if (s.in_flight) throw InvalidArgument("Recorder: recording after submit() needs wait() first (the command buffer is in flight)");
}

OpScope::OpScope(Recorder& r) : r_(r) {
  auto& s = state_of(r);
  require_recording(s);
  memory_barrier(s, kWorkStages, kWriteAccess, kWorkStages, kAllAccess);
}

OpScope::~OpScope() {
  auto& s = state_of(r_);
  if (!s.external || !s.resources.commands_after_last_event || s.dev->tuning.compile_only) return;
  auto& d = *s.dev;
  VkEvent event = VK_NULL_HANDLE;
  if (!s.spare_events.empty()) {  // reset, its last command buffer past it
    event = s.spare_events.back();
    s.spare_events.pop_back();
  } else {
    VkEventCreateInfo ei{VK_STRUCTURE_TYPE_EVENT_CREATE_INFO};
    // Without the event, the resources stay until the Context ends (commands_after_last_event).
    if (d.vk.vkCreateEvent(d.device, &ei, nullptr, &event) != VK_SUCCESS) return;
    ++d.counters.events;
  }
  s.resources.events.push_back(event);
  d.vk.vkCmdSetEvent(s.cb, event, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT);
  s.resources.commands_after_last_event = false;
}

void require_own_buffer(Recorder& r, const Buffer* b, const std::string& name) {
  if (!b) return;
  const Device* made_on = RuntimeAccess::device(*b);
  if (!made_on)
    throw InvalidArgument(name + " = an empty Buffer (default-constructed or moved from): must be a buffer made on the Context the Recorder (or RingRank) records on");
  if (made_on != state_of(r).dev.get())
    throw InvalidArgument(name + " = a buffer of another Context: must be made on the Context the Recorder (or RingRank) records on");
}

void require_own_buffers(Recorder& r, std::initializer_list<BufferRole> buffers) {
  for (const BufferRole& x : buffers) require_own_buffer(r, x.buffer, x.name);
  auto range = [](const Buffer& b) { return "bytes [" + std::to_string(b.offset()) + ", " + std::to_string(b.offset() + b.size()) + ")"; };
  for (auto a = buffers.begin(); a != buffers.end(); ++a)
    for (auto b = a + 1; b != buffers.end(); ++b) {
      if (!a->buffer || !b->buffer || !(a->written || b->written)) continue;
      const Buffer &x = *a->buffer, &y = *b->buffer;
      const char* written = a->written ? a->name : b->name;
      if (&x == &y) throw InvalidArgument(std::string(b->name) + " = the " + a->name + ": must be a buffer of its own (the op writes the " + written + ")");
      // A compile-only Context's buffers have no VkBuffer.
      if (x.handle() == VK_NULL_HANDLE || x.handle() != y.handle()) continue;
      if (x.offset() >= y.offset() + y.size() || y.offset() >= x.offset() + x.size()) continue;
      throw InvalidArgument(std::string(b->name) + " = " + range(y) + " of the VkBuffer whose " + range(x) + " are the " + a->name +
                            ": must not overlap it (the op writes the " + written + ")");
    }
}

void require_plan_recorder(Recorder& r, const std::shared_ptr<Device>& dev) {
  if (state_of(r).dev != dev) throw InvalidArgument("recorder = of another Context: must record on the Context the plan was built on");
}

void retain_spare_scratch(Recorder& r) { state_of(r).retain_spares = true; }

void barrier(Recorder& r) {
  auto& s = state_of(r);
  memory_barrier(s, kWorkStages, kWriteAccess, kWorkStages, kAllAccess);
}

namespace {
// A spare scratch buffer of `use` whose last user's submission has finished (ops never assume fresh
// contents): of exactly `bytes`, or (at_least) the smallest that holds them; a new one otherwise.
Buffer& take_scratch(Recorder& r, std::uint64_t bytes, MemoryUse use, bool at_least) {
  auto& s = state_of(r);
  bytes = std::max<std::uint64_t>(bytes, 16);
  // A larger spare only within one binding's range where the request is: ops bind a scratch
  // buffer whole, so one that fits a binding must stay one that does.
  const std::uint64_t range = s.dev->limits.max_storage_buffer_range;
  const std::uint64_t largest = bytes > range ? ~std::uint64_t{0} : range;
  auto best = s.spare_scratch.end();
  auto best_use = s.spare_uses.end();
  auto use_it = s.spare_uses.begin();
  for (auto it = s.spare_scratch.begin(); it != s.spare_scratch.end(); ++it, ++use_it)
    if (*use_it == use && (at_least ? it->size() >= bytes && it->size() <= largest : it->size() == bytes) &&
        (best == s.spare_scratch.end() || it->size() < best->size())) {
      best = it;
      best_use = use_it;
    }
  if (best != s.spare_scratch.end()) {
    s.resources.scratch.splice(s.resources.scratch.end(), s.spare_scratch, best);
    s.spare_uses.erase(best_use);
    s.resources.scratch_uses.push_back(use);
    return s.resources.scratch.back();
  }
  s.resources.scratch.push_back(RuntimeAccess::buffer(s.dev, bytes, use));
  s.resources.scratch_uses.push_back(use);
  return s.resources.scratch.back();
}
}  // namespace

Buffer& scratch(Recorder& r, std::uint64_t bytes, MemoryUse use) { return take_scratch(r, bytes, use, false); }

Buffer& scratch_at_least(Recorder& r, std::uint64_t bytes, MemoryUse use) { return take_scratch(r, bytes, use, true); }

void dispatch(Recorder& r, DescriptorSource* sets, ShaderId shader, const SpecValues& spec, const BindingSpans& bindings, const void* push,
              std::size_t push_bytes, std::uint32_t groups_x, std::uint32_t groups_y, std::uint32_t groups_z) {
  auto& s = state_of(r);
  auto& d = *s.dev;
  check_contract(shader, bindings);
  const Pipeline& p = d.pipeline(shader, spec);
  if (push_bytes > 128) throw Error("internal: push constants over 128 bytes");
  const auto& lim = d.limits;
  if (groups_x == 0 || groups_y == 0 || groups_z == 0) return;
  if (groups_x > lim.max_workgroup_count[0] || groups_y > lim.max_workgroup_count[1] || groups_z > lim.max_workgroup_count[2])
    throw Error("internal: dispatch of " + std::to_string(groups_x) + "x" + std::to_string(groups_y) + "x" +
                std::to_string(groups_z) + " workgroups exceeds maxComputeWorkGroupCount");

  VkDescriptorBufferInfo infos[kMaxBindings];
  VkWriteDescriptorSet writes[kMaxBindings];
  std::uint32_t i = 0;
  for (const BufferSpan& b : bindings.spans()) {
    // Every op names its caller's buffers first (require_own_buffer); this guards the rest, before
    // a descriptor could hold a VkBuffer of another device.
    if (RuntimeAccess::device(*b.buffer) != &d)
      throw InvalidArgument("binding " + std::string(shader_contract(shader).bindings[i].name) + " of " + std::string(embedded_shader(shader).name) + " = " +
                            (RuntimeAccess::device(*b.buffer) ? "a buffer of another Context" : "an empty Buffer (default-constructed or moved from)") +
                            ": every buffer must be made on the Context the Recorder (or RingRank) records on");
    std::uint64_t range = b.bytes ? b.bytes : b.buffer->capacity() - b.offset;
    range = std::min<std::uint64_t>((range + 3) / 4 * 4, b.buffer->capacity() - b.offset);
    if (range > lim.max_storage_buffer_range || b.offset % lim.min_storage_buffer_offset_alignment != 0)
      throw Error("internal: binding " + std::to_string(i) + " of " + std::string(embedded_shader(shader).name) + " (offset " +
                  std::to_string(b.offset) + ", range " + std::to_string(range) + ") breaks the device's storage buffer limits");
    infos[i] = {b.buffer->handle(), b.buffer->offset() + b.offset, range};
    writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[i].dstBinding = i;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
    ++i;
  }
  if (d.tuning.compile_only) {  // planned, checked and compiled: nothing to record
    ++s.dispatches;
    return;
  }
  if (s.time_dispatches && s.next_timestamp + 2 > kTimestampCapacity)  // refused before anything of it is recorded
    throw InvalidArgument("Recorder::time_dispatches: dispatch " + std::to_string(s.dispatches + 1) + " of this recording needs timestamps past the " +
                          std::to_string(kTimestampCapacity) + " a recording holds (two a timed dispatch)");
  d.vk.vkCmdBindPipeline(s.cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  if (d.push_descriptors) {  // the bindings travel in the command buffer: no set to write again later
    d.vk.vkCmdPushDescriptorSetKHR(s.cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, i, writes);
  } else {
    const TakenSet taken = sets ? sets->take(p, {infos, i}) : TakenSet{allocate_set(s, p.set_layout), false};
    const VkDescriptorSet set = taken.set;
    if (!taken.written) {
      for (std::uint32_t k = 0; k < i; ++k) writes[k].dstSet = set;
      d.vk.vkUpdateDescriptorSets(d.device, i, writes, 0, nullptr);
    }
    d.vk.vkCmdBindDescriptorSets(s.cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
  }
  if (push_bytes) d.vk.vkCmdPushConstants(s.cb, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, static_cast<std::uint32_t>(push_bytes), push);
  const std::uint32_t before = s.time_dispatches ? r.write_timestamp() : 0;
  d.vk.vkCmdDispatch(s.cb, groups_x, groups_y, groups_z);
  mark_command(s);
  if (s.time_dispatches) s.timed.push_back({shader, before, r.write_timestamp()});
  ++s.dispatches;
}

void copy_regions(Recorder& r, const Buffer& src, const Buffer& dst, const std::vector<VkBufferCopy>& regions) {
  auto& s = state_of(r);
  if (regions.empty() || s.dev->tuning.compile_only) return;
  if (src.offset() == 0 && dst.offset() == 0) {  // the common case: no copy of the regions on a plan's step
    s.dev->vk.vkCmdCopyBuffer(s.cb, src.handle(), dst.handle(), static_cast<std::uint32_t>(regions.size()), regions.data());
  } else {
    std::vector<VkBufferCopy> at = regions;  // into the VkBuffers: past external views' offsets
    for (VkBufferCopy& c : at) {
      c.srcOffset += src.offset();
      c.dstOffset += dst.offset();
    }
    s.dev->vk.vkCmdCopyBuffer(s.cb, src.handle(), dst.handle(), static_cast<std::uint32_t>(at.size()), at.data());
  }
  mark_command(s);
}

void update_words(Recorder& r, const Buffer& dst, std::uint64_t offset, const std::vector<std::uint32_t>& words) {
  auto& s = state_of(r);
  if (s.dev->tuning.compile_only) return;
  constexpr std::size_t kPiece = 65536 / 4;  // vkCmdUpdateBuffer's limit
  for (std::size_t first = 0; first < words.size(); first += kPiece) {
    const std::size_t n = std::min(kPiece, words.size() - first);
    s.dev->vk.vkCmdUpdateBuffer(s.cb, dst.handle(), dst.offset() + offset + first * 4, n * 4, words.data() + first);
  }
  if (!words.empty()) mark_command(s);
}

void fill_words(Recorder& r, const Buffer& dst, std::uint64_t offset, std::uint64_t bytes, std::uint32_t value) {
  auto& s = state_of(r);
  if (s.dev->tuning.compile_only) return;
  s.dev->vk.vkCmdFillBuffer(s.cb, dst.handle(), dst.offset() + offset, bytes, value);
  mark_command(s);
}


}  // namespace detail

using detail::RecorderState;
using detail::vk_check;

Recorder::Recorder(Context& ctx) : state_(std::make_unique<State>()) {
  auto& s = *state_;
  s.dev = detail::device_of(ctx);
  s.ctx = RuntimeAccess::context(s.dev);
  auto& d = *s.dev;
  d.free_retired(false);
  if (d.tuning.compile_only) return;  // records nothing
  if (auto spare = d.take_own()) {  // the latest destroyed own Recorder's
    s.command_pool = spare->commands.pool;
    s.cb = spare->commands.cb;
    s.fence = spare->commands.fence;
    detail::adopt_spare(s, std::move(spare->resources));
    detail::begin_own(s);
    return;
  }
  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = d.queue_family;
  vk_check(d.vk.vkCreateCommandPool(d.device, &pci, nullptr, &s.command_pool), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = s.command_pool;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  vk_check(d.vk.vkAllocateCommandBuffers(d.device, &ai, &s.cb), "vkAllocateCommandBuffers");
  VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  vk_check(d.vk.vkCreateFence(d.device, &fi, nullptr, &s.fence), "vkCreateFence");
  ++d.counters.command_buffers;  // with its pool and fence
  detail::begin_own(s);
}

Recorder::Recorder(Context& ctx, VkCommandBuffer external) : state_(std::make_unique<State>()) {
  if (!external) throw InvalidArgument("Recorder: external command buffer is null");
  auto& s = *state_;
  s.dev = detail::device_of(ctx);
  s.ctx = RuntimeAccess::context(s.dev);
  s.cb = external;
  s.external = true;
  s.dev->free_retired(false);
  detail::adopt_spare(s, s.dev->take_spare());
}

Recorder::~Recorder() = default;
Recorder::Recorder(Recorder&&) noexcept = default;
Recorder& Recorder::operator=(Recorder&&) noexcept = default;

Context& Recorder::context() const { return *detail::state_of(*this).ctx; }
std::uint32_t Recorder::dispatch_count() const { return detail::state_of(*this).dispatches; }
VkCommandBuffer Recorder::command_buffer() const { return detail::state_of(*this).cb; }

void Recorder::submit_and_wait() {
  submit();
  wait();
}

void Recorder::submit() {
  auto& s = detail::state_of(*this);
  if (s.external) throw InvalidArgument("Recorder::submit: this recorder records into the application's command buffer; the application submits it");
  detail::require_recording(s);
  auto& d = *s.dev;
  if (d.tuning.compile_only) return;
  // Results become visible to the host (downloads of mapped buffers read them directly).
  detail::memory_barrier(s, detail::kWorkStages, detail::kWriteAccess, VK_PIPELINE_STAGE_HOST_BIT | detail::kWorkStages,
                         VK_ACCESS_HOST_READ_BIT | detail::kAllAccess);
  vk_check(d.vk.vkEndCommandBuffer(s.cb), "vkEndCommandBuffer");
  s.ticket = d.submit(s.cb, s.fence);
  s.in_flight = true;
}

bool Recorder::in_flight() const { return detail::state_of(*this).in_flight; }

void Recorder::wait() {
  auto& s = detail::state_of(*this);
  if (s.external) throw InvalidArgument("Recorder::wait: this recorder records into the application's command buffer; the application submits it");
  auto& d = *s.dev;
  if (d.tuning.compile_only) {
    detail::begin_own(s);
    return;
  }
  if (!s.in_flight) return;
  d.wait(s.fence, s.ticket);  // (throwing, it leaves the recorder in flight: its destructor keeps nothing)
  s.in_flight = false;
  vk_check(d.vk.vkResetFences(d.device, 1, &s.fence), "vkResetFences");
  if (s.next_timestamp > 0) {
    s.timestamp_values.assign(s.next_timestamp, 0);
    vk_check(d.vk.vkGetQueryPoolResults(d.device, s.resources.query_pool, 0, s.next_timestamp, s.next_timestamp * sizeof(std::uint64_t),
                                        s.timestamp_values.data(), sizeof(std::uint64_t),
                                        VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
             "vkGetQueryPoolResults");
  }
  s.timed_finished = std::move(s.timed);
  detail::recycle_submitted(s);
  vk_check(d.vk.vkResetCommandBuffer(s.cb, 0), "vkResetCommandBuffer");
  d.free_retired(false);
  detail::begin_own(s);
}

void Recorder::release(VkPipelineStageFlags dst_stages, VkAccessFlags dst_access) {
  auto& s = detail::state_of(*this);
  detail::require_recording(s);  // a barrier into a command buffer in flight is invalid
  detail::memory_barrier(s, detail::kWorkStages, detail::kWriteAccess, dst_stages, dst_access);
}

std::uint32_t Recorder::write_timestamp() {
  auto& s = detail::state_of(*this);
  auto& d = *s.dev;
  detail::require_recording(s);
  if (!d.limits.timestamps) throw VulkanError("this device's compute queue does not support timestamp queries");
  if (!s.resources.query_pool) {
    VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = detail::kTimestampCapacity;
    vk_check(d.vk.vkCreateQueryPool(d.device, &qi, nullptr, &s.resources.query_pool), "vkCreateQueryPool");
    ++d.counters.query_pools;
  }
  if (!s.timestamps_reset) {
    d.vk.vkCmdResetQueryPool(s.cb, s.resources.query_pool, 0, detail::kTimestampCapacity);
    s.timestamps_reset = true;
  }
  if (s.next_timestamp >= detail::kTimestampCapacity)
    throw InvalidArgument("Recorder::write_timestamp: more than " + std::to_string(detail::kTimestampCapacity) + " timestamps in one recording");
  d.vk.vkCmdWriteTimestamp(s.cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, s.resources.query_pool, s.next_timestamp);
  detail::mark_command(s);
  return s.next_timestamp++;
}

double Recorder::elapsed_ms(std::uint32_t from, std::uint32_t to) const {
  auto& s = detail::state_of(*this);
  auto& d = *s.dev;
  std::uint64_t a = 0, b = 0;
  if (s.external) {
    if (!s.resources.query_pool || std::max(from, to) >= s.next_timestamp) throw InvalidArgument("Recorder::elapsed_ms: unknown timestamp index");
    // Not waited for: the application may never submit its command buffer.
    std::uint64_t v[2];
    for (int k = 0; k < 2; ++k) {
      const VkResult res = d.vk.vkGetQueryPoolResults(d.device, s.resources.query_pool, k ? to : from, 1, sizeof(std::uint64_t), &v[k],
                                                      sizeof(std::uint64_t), VK_QUERY_RESULT_64_BIT);
      if (res == VK_NOT_READY)
        throw InvalidArgument("Recorder::elapsed_ms: the timestamps of the application's command buffer are not written yet (submit it and wait for it first)");
      vk_check(res, "vkGetQueryPoolResults");
    }
    a = v[0], b = v[1];
  } else {
    if (std::max(from, to) >= s.timestamp_values.size())
      throw InvalidArgument("Recorder::elapsed_ms: timestamp index not in the last finished submission");
    a = s.timestamp_values[from], b = s.timestamp_values[to];
  }
  // Signed: from a later timestamp to an earlier one is a negative time, not 2^64 ticks.
  return static_cast<double>(static_cast<std::int64_t>(b - a)) * d.limits.timestamp_period_ns * 1e-6;
}

void Recorder::time_dispatches(bool on) {
  auto& s = detail::state_of(*this);
  if (on && !s.dev->limits.timestamps) throw VulkanError("Recorder::time_dispatches: this device's compute queue does not support timestamp queries");
  s.time_dispatches = on;
}

std::vector<DispatchTime> Recorder::dispatch_times() const {
  const auto& s = detail::state_of(*this);
  std::vector<DispatchTime> out;
  for (const auto& t : s.external ? s.timed : s.timed_finished)
    out.push_back({std::string(detail::embedded_shader(t.shader).name), elapsed_ms(t.before, t.after)});
  return out;
}

}  // namespace relpos
