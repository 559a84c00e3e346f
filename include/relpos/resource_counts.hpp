#pragma once
// How many Vulkan objects a Context has created so far: what a hot loop (a decode step recorded
// through a plan, a Recorder reused across steps) must leave unchanged after its first step.
#include <cstdint>

namespace relpos {

class Context;

struct ResourceCounts {
  std::uint64_t buffers = 0;             // vkCreateBuffer (relpos's own buffers, scratch and staging included)
  std::uint64_t memory_allocations = 0;  // vkAllocateMemory
  std::uint64_t descriptor_pools = 0;    // vkCreateDescriptorPool
  std::uint64_t pipelines = 0;           // vkCreateComputePipelines (pipelines are cached per shader and specialisation)
  std::uint64_t descriptor_sets = 0;     // vkAllocateDescriptorSets
  std::uint64_t events = 0;              // vkCreateEvent (the end of an operation in an application's command buffer; a plan's steps)
  std::uint64_t command_buffers = 0;     // vkAllocateCommandBuffers, each with its command pool and fence (a Recorder of its own, staging)
  std::uint64_t query_pools = 0;         // vkCreateQueryPool (timestamps)
  // Buffers, memory allocations and descriptor pools together.
  std::uint64_t allocations() const { return buffers + memory_allocations + descriptor_pools; }
  // Every Vulkan object above.
  std::uint64_t objects() const { return allocations() + pipelines + descriptor_sets + events + command_buffers + query_pools; }
};

// Counts since the Context was made, over every thread.
ResourceCounts resource_counts(const Context& ctx);

}  // namespace relpos
