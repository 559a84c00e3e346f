#include "tooling/testing_options.hpp"

#include <algorithm>

#include "vk/access.hpp"

namespace relpos::detail {

Context testing_context(const ContextOptions& options, const TestingOptions& testing) {
  Context ctx(options);
  Device& d = *device_of(ctx);
  d.staging_only = testing.staging_only;
  if (testing.no_subgroup_shuffles) d.limits.subgroup_shuffle = false;
  if (testing.descriptor_sets) d.push_descriptors = false;  // (before any pipeline made its set layout)
  if (testing.max_storage_buffer_range)
    d.limits.max_storage_buffer_range = std::min(d.limits.max_storage_buffer_range, testing.max_storage_buffer_range);
  if (testing.max_shared_memory_bytes) d.limits.max_shared_memory_bytes = std::min(d.limits.max_shared_memory_bytes, testing.max_shared_memory_bytes);
  d.gpu_attention_lanes = testing.gpu_attention_lanes;
  d.gpu_shuffle_lanes = testing.gpu_shuffle_lanes;
  if (testing.max_workgroup_count)
    for (auto& c : d.limits.max_workgroup_count) c = std::min(c, testing.max_workgroup_count);
  return ctx;
}

}  // namespace relpos::detail
