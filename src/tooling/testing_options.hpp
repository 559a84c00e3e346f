#pragma once
// Contexts for tests and the fuzzer, made to believe less of their device than it offers, so that
// the split and fallback paths run on small tensors. Not installed: only relpos's own tests and
// tool reach it (the CMake target relpos_tooling); applications use ContextOptions.
#include <cstdint>

#include "relpos/context.hpp"

namespace relpos::detail {

struct TestingOptions {
  // Lower the device's limits (0 = keep): bindings beyond maxStorageBufferRange and dispatches
  // beyond maxComputeWorkGroupCount (each dimension) then split at small sizes.
  std::uint64_t max_storage_buffer_range = 0;
  std::uint32_t max_workgroup_count = 0;
  // Never map MemoryUse::Device buffers, even where device memory is host-visible, so uploads and
  // downloads take the staging path a discrete GPU uses.
  bool staging_only = false;
  // Treat the device as one without subgroup shuffles, so that the kernels such devices get run.
  bool no_subgroup_shuffles = false;
  // Record bindings through descriptor sets even where the device pushes them, so that the path of
  // devices (and adopted devices) without VK_KHR_push_descriptor runs.
  bool descriptor_sets = false;
  // Lower the shared memory a workgroup may take (0 = keep), so that the GPU kernels run with
  // smaller tiles than the device would give them.
  std::uint32_t max_shared_memory_bytes = 0;
  // The lanes of the GPU attention kernel's workgroups (0 = its own choice; a power of two up to
  // 64): fewer lanes per query row than any device would get.
  std::uint32_t gpu_attention_lanes = 0;
  // The GPU class's subgroup shuffles within at most this many lanes (0 = the subgroup; a power of
  // two): the kernels a device of narrower subgroups gets (lavapipe's 8) on a wider one.
  std::uint32_t gpu_shuffle_lanes = 0;
};

// A Context made from `options`, then changed by `testing` before anything uses it.
Context testing_context(const ContextOptions& options, const TestingOptions& testing);

}  // namespace relpos::detail
