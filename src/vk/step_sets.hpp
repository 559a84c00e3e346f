#pragma once
// Descriptor sets of a plan, reused step after step: each step recorded takes a slot (the sets of
// its dispatches) whose last step has executed, known by an event the step sets at its end; a
// step recorded while every slot is pending gets a new one. Sets are written when taken, never
// while a pending command buffer may use them. Within a step, dispatches that bind the same
// buffers share one set (a launch cut into several dispatches, a packed call's two launches), and
// a slot is made with the sets its plan reserved, so that a step shape first seen late (the first
// step whose keys split, which adds the merge) takes nothing new.
#include <array>
#include <list>
#include <map>
#include <memory>
#include <vector>

#include "shaders/contracts.hpp"
#include "vk/dispatch.hpp"

namespace relpos::detail {

class StepSets {
 public:
  explicit StepSets(std::shared_ptr<Device> dev);
  ~StepSets();
  StepSets(const StepSets&) = delete;
  StepSets& operator=(const StepSets&) = delete;

  // One set of `shader`'s layout more in every slot, from its creation: the plan's step may dispatch
  // it (with buffers of its own). Before the first step.
  void reserve(ShaderId shader);
  // The sets of the step about to be recorded.
  DescriptorSource& begin_step();
  // Records, in r's command buffer, the event that says the step begun last has executed.
  void end_step(Recorder& r);
  // Whether every step recorded has executed (or none was).
  bool finished() const;
  // Hands the pools and events, with `buffers`, to the Device, which frees them once the event of
  // the last step is set (for an owner destroyed while steps may be pending).
  void retire(std::list<Buffer>&& buffers);

 private:
  struct Slot final : DescriptorSource {
    StepSets* owner = nullptr;
    VkEvent done = VK_NULL_HANDLE;
    bool pending = false;
    VkCommandBuffer cb = VK_NULL_HANDLE;  // where the step was recorded, and Device::release_count() then
    std::uint64_t releases = 0;
    std::map<VkDescriptorSetLayout, std::vector<VkDescriptorSet>> sets;
    std::map<VkDescriptorSetLayout, std::size_t> taken;  // this step's, per layout
    // This step's sets and the buffers written into each (kMaxBindings at most).
    struct Written {
      VkDescriptorSetLayout layout;
      VkDescriptorSet set;
      std::uint32_t count;
      std::array<VkDescriptorBufferInfo, kMaxBindings> buffers;
    };
    std::vector<Written> written;
    TakenSet take(const Pipeline& p, std::span<const VkDescriptorBufferInfo> buffers) override;
  };
  VkDescriptorSet allocate(VkDescriptorSetLayout layout);
  // The slot's step has executed (its event is set) or its command buffer was released since.
  bool done(const Slot& s) const;
  void release();

  std::shared_ptr<Device> dev_;
  std::list<Slot> slots_;
  Slot* current_ = nullptr;
  Slot* last_ = nullptr;
  std::vector<VkDescriptorPool> pools_;
  std::uint32_t sets_left_ = 0;
  std::map<VkDescriptorSetLayout, std::size_t> reserved_;  // sets each slot is made with
};

}  // namespace relpos::detail
