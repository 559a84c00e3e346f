#include "relpos/resource_counts.hpp"

#include "relpos/context.hpp"
#include "vk/access.hpp"
#include "vk/device.hpp"

namespace relpos {

ResourceCounts resource_counts(const Context& ctx) {
  const auto& c = detail::device_of(ctx)->counters;
  return {c.buffers.load(),         c.memory_allocations.load(), c.descriptor_pools.load(), c.pipelines.load(),
          c.descriptor_sets.load(), c.events.load(),             c.command_buffers.load(),  c.query_pools.load()};
}

}  // namespace relpos
