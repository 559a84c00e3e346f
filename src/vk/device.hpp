#pragma once
// Everything a Context owns. Buffers and recorders hold a shared_ptr to it, so the device outlives
// them whatever order the application destroys things in.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "relpos/context.hpp"
#include "vk/vulkan.hpp"

namespace relpos::detail {

struct Pipeline {
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  std::uint32_t binding_count = 0;
  std::uint32_t local_size_x = 1;
};

struct Device {
  VkInstance instance = VK_NULL_HANDLE;
  bool owns_instance = false;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  bool owns_device = false;
  VkQueue queue = VK_NULL_HANDLE;
  std::uint32_t queue_family = 0;
  VolkDeviceTable vk{};

  DeviceInfo info;
  DeviceLimits limits;
  VkPhysicalDeviceMemoryProperties memory{};
  bool validation = false;
  bool staging_only = false;
  DistanceExpansion distance_expansion = DistanceExpansion::Auto;
  std::atomic<std::uint64_t> validation_messages{0};
  std::function<void(const ValidationMessage&)> on_message;

  std::mutex submit_mutex;  // the queue and `command_pool` are externally synchronised objects
  VkCommandPool command_pool = VK_NULL_HANDLE;
  VkPipelineCache pipeline_cache = VK_NULL_HANDLE;
  std::mutex pipeline_mutex;
  std::map<std::string, Pipeline> pipelines;

  ~Device();

  // The pipeline of an embedded shader with the given specialization constants (ids 0, 1, ...;
  // id 0 is the workgroup size), compiled once and cached.
  const Pipeline& pipeline(std::string_view shader, const std::vector<std::uint32_t>& spec);

  // Memory type for `type_bits` with the properties `use` asks for.
  std::uint32_t memory_type(std::uint32_t type_bits, bool host_visible) const;

  // Runs `record` in a one-time command buffer and waits for it.
  void run_once(const std::function<void(VkCommandBuffer)>& record);

  void report(const ValidationMessage& m);
};

}  // namespace relpos::detail
