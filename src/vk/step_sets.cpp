#include "vk/step_sets.hpp"

#include "vk/access.hpp"

#include <algorithm>
#include <utility>

namespace relpos::detail {
namespace {

// Enough for several slots of a few dispatches each (a fused attention step takes three).
constexpr std::uint32_t kSetsPerPool = 32;

}  // namespace

StepSets::StepSets(std::shared_ptr<Device> dev) : dev_(std::move(dev)) {}

StepSets::~StepSets() { release(); }

void StepSets::release() {
  if (!dev_) return;
  auto& d = *dev_;
  for (auto& s : slots_)
    if (s.done) d.vk.vkDestroyEvent(d.device, s.done, nullptr);
  for (auto pool : pools_) d.vk.vkDestroyDescriptorPool(d.device, pool, nullptr);
  slots_.clear();
  pools_.clear();
  dev_.reset();
}

bool StepSets::done(const Slot& s) const {
  auto& d = *dev_;
  return d.vk.vkGetEventStatus(d.device, s.done) == VK_EVENT_SET || d.released_since(s.cb, s.releases);
}

bool StepSets::finished() const {
  for (const auto& s : slots_)
    if (s.pending && !done(s)) return false;
  return true;
}

void StepSets::retire(std::list<Buffer>&& buffers) {
  RecordingResources r;
  r.sets.pools = std::move(pools_);  // the slots' sets: a later recording takes fresh ones
  r.scratch = std::move(buffers);
  for (auto& s : slots_)
    if (&s != last_) r.events.push_back(s.done);
  if (last_) r.events.push_back(last_->done);  // last: once it is set, every step has executed
  r.commands_after_last_event = last_ == nullptr;
  slots_.clear();
  pools_.clear();
  dev_->retire(std::move(r), {}, {}, {}, VK_NULL_HANDLE);
  dev_.reset();
}

DescriptorSource& StepSets::begin_step() {
  auto& d = *dev_;
  current_ = nullptr;
  for (auto& s : slots_) {
    if (s.pending) {
      if (!done(s)) continue;
      vk_check(d.vk.vkResetEvent(d.device, s.done), "vkResetEvent");
      s.pending = false;
    }
    current_ = &s;
    break;
  }
  if (!current_) {
    Slot& s = slots_.emplace_back();
    s.owner = this;
    VkEventCreateInfo ei{VK_STRUCTURE_TYPE_EVENT_CREATE_INFO};
    vk_check(d.vk.vkCreateEvent(d.device, &ei, nullptr, &s.done), "vkCreateEvent");
    ++d.counters.events;
    if (!d.push_descriptors)  // (pushed bindings need no set)
      for (const auto& [layout, n] : reserved_)
        for (std::size_t k = 0; k < n; ++k) s.sets[layout].push_back(allocate(layout));
    current_ = &s;
  }
  current_->taken.clear();
  current_->written.clear();
  return *current_;
}

void StepSets::reserve(ShaderId shader) {
  ++reserved_[dev_->storage_set_layout(static_cast<std::uint32_t>(shader_contract(shader).bindings.size()))];
}

void StepSets::end_step(Recorder& r) {
  auto& s = state_of(r);
  if (s.dev->tuning.compile_only) {  // nothing was recorded: the slot is free again
    current_ = nullptr;
    return;
  }
  s.dev->vk.vkCmdSetEvent(s.cb, current_->done, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT);
  current_->pending = true;
  current_->cb = s.cb;
  current_->releases = s.dev->release_count();
  last_ = current_;
  current_ = nullptr;
}

TakenSet StepSets::Slot::take(const Pipeline& p, std::span<const VkDescriptorBufferInfo> buffers) {
  auto same = [&](const Written& w) {
    if (w.layout != p.set_layout || w.count != buffers.size()) return false;
    for (std::size_t k = 0; k < buffers.size(); ++k)
      if (w.buffers[k].buffer != buffers[k].buffer || w.buffers[k].offset != buffers[k].offset || w.buffers[k].range != buffers[k].range) return false;
    return true;
  };
  for (const Written& w : written)
    if (same(w)) return {w.set, true};
  auto& list = sets[p.set_layout];
  std::size_t& n = taken[p.set_layout];
  if (n == list.size()) list.push_back(owner->allocate(p.set_layout));
  Written& w = written.emplace_back(Written{p.set_layout, list[n++], static_cast<std::uint32_t>(buffers.size()), {}});
  std::copy(buffers.begin(), buffers.end(), w.buffers.begin());
  return {w.set, false};
}

VkDescriptorSet StepSets::allocate(VkDescriptorSetLayout layout) {
  auto& d = *dev_;
  if (sets_left_ == 0) {
    pools_.push_back(d.create_descriptor_pool(kSetsPerPool, kMaxBindings));
    sets_left_ = kSetsPerPool;
  }
  --sets_left_;
  return d.allocate_descriptor_set(pools_.back(), layout);
}

}  // namespace relpos::detail
