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
  // Buffers, memory allocations and descriptor pools together.
  std::uint64_t allocations() const { return buffers + memory_allocations + descriptor_pools; }
};

// Counts since the Context was made, over every thread.
ResourceCounts resource_counts(const Context& ctx);

}  // namespace relpos
