#pragma once
// GPU tests run on one context per test binary with validation on. Each test fails if the layer
// reported anything while it ran.
#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <string>
#include <vector>

namespace relpos::test {

// The usage of the application buffers the tests wrap (Buffer::external): storage, and transfers
// both ways for uploads and downloads.
inline constexpr VkBufferUsageFlags kAppBufferUsage =
    VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;

// The validated context (RELPOS_DEVICE picks the device, as for the tool).
Context& gpu();
// A context on the same device whose limits are lowered so that small tensors take the split
// paths: a 4 KiB maxStorageBufferRange and at most 3 workgroups per dispatch dimension.
Context& gpu_small_limits();
// Only the workgroup count lowered (3 per dimension): rows too long for a 4 KiB binding can still
// take several dispatches along them.
Context& gpu_few_workgroups();

// A validated context whose per-distance biases always take one path (Shader or Copies), whatever
// the device: each path is tested on every device.
Context& gpu_expansion(DistanceExpansion path);

// A validated context that treats the device as one without subgroup shuffles: the kernels
// other devices get (matmul.comp instead of matmul_shared, fused attention without shared key
// loads, the Fourier row without shared rotation loads).
Context& gpu_without_shuffles();

// A validated context whose ops use one kernel class (Kernels::Cpu or Gpu), whatever the device:
// both classes are tested on every device.
Context& gpu_kernels(Kernels kernels);
// A new validated context of the GPU kernel class with tiles shrunk: at most `shared_bytes` of
// shared memory per workgroup and `lanes` lanes in fused attention's (0: the device's own), and
// `workgroups` per dispatch dimension (0: the device's), with or without the device's subgroup
// shuffles. (The caller destroys it within the test: several validated contexts destroyed at exit
// crashed the layer, 1.3.239.)
// binding_range: maxStorageBufferRange lowered to it (0: the device's), so that calls go in chunks.
// shuffle_lanes: the kernels' shuffles within at most that many lanes (0: the subgroup), so that a
// device of wide subgroups runs the kernels a narrow one gets.
Context gpu_kernels_tiles(std::uint32_t shared_bytes, std::uint32_t lanes, std::uint32_t workgroups = 0, bool subgroup_shuffles = true,
                          std::uint32_t binding_range = 0, std::uint32_t shuffle_lanes = 0);

// The options of every validated context here (validation on, messages collected for GpuTest):
// for contexts a test makes itself, such as one per rank of an in-process ring.
ContextOptions validated_context_options();

// A validated context that never maps device memory (uploads, downloads and ring attention's chunks
// take the staging path of a discrete GPU).
Context& gpu_staging_only();

// Messages the layer reported since the last call.
std::vector<std::string> take_validation_messages();

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
};

// Runs `record` in a fresh recorder of `ctx` and waits.
template <class F>
void run(Context& ctx, F&& record) {
  Recorder r(ctx);
  record(r);
  r.submit_and_wait();
}

}  // namespace relpos::test
