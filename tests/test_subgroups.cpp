// Kernels that number their lanes subgroup by subgroup (the GPU kernels that shuffle,
// attention_fused_shuffle) need full subgroups, which Vulkan promises only to pipelines created
// asking for them: with the pinned size on a device of several sizes, or, on a device of one size
// with computeFullSubgroups (lavapipe's 8, Vulkan 1.3's core), with that size. The validation layer
// checks each such pipeline's workgroup against the size in every GPU test.
#include <gtest/gtest.h>

#include "relpos/context.hpp"
#include "support/gpu_fixture.hpp"
#include "vk/access.hpp"
#include "vk/device.hpp"

using relpos::test::GpuTest;
using relpos::test::gpu;

namespace {
class Subgroups : public GpuTest {};
}  // namespace

TEST_F(Subgroups, PipelinesAskForFullSubgroups) {
  const relpos::detail::Device& d = *relpos::detail::device_of(gpu());
  if (gpu().device_info().api_version < VK_API_VERSION_1_3) GTEST_SKIP() << "subgroupSizeControl is not core before Vulkan 1.3";
  EXPECT_EQ(d.required_subgroup_size + d.full_subgroup_size, gpu().limits().subgroup_size);
  EXPECT_TRUE(d.required_subgroup_size == 0 || d.full_subgroup_size == 0) << "one way or the other";
}
