#pragma once
// The Vulkan context relpos runs on: either one it creates (picking a device), or one adopted from
// an application that already has its own instance, device and queue.
#include <vulkan/vulkan_core.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace relpos {

namespace detail {
struct Device;
}

enum class DeviceType { Discrete, Integrated, Virtual, Cpu, Other };
std::string_view device_type_name(DeviceType t);

struct DeviceInfo {
  std::uint32_t index = 0;  // position in vkEnumeratePhysicalDevices
  std::string name;
  DeviceType type = DeviceType::Other;
  std::uint32_t vendor_id = 0;
  std::uint32_t device_id = 0;
  std::uint32_t api_version = 0;
  std::string driver;       // driver name and info, where the device reports them
  bool has_compute = false;  // a queue family with compute
};

// The limits relpos plans its dispatches with: read from the device, never assumed.
struct DeviceLimits {
  std::uint64_t max_storage_buffer_range = 0;
  std::uint64_t min_storage_buffer_offset_alignment = 0;
  std::uint32_t max_workgroup_count[3] = {0, 0, 0};
  std::uint32_t max_workgroup_size[3] = {0, 0, 0};
  std::uint32_t max_workgroup_invocations = 0;
  std::uint32_t max_shared_memory_bytes = 0;
  std::uint32_t max_push_constants_size = 0;
  std::uint64_t max_memory_allocation_size = 0;
  std::uint32_t subgroup_size = 0;
  bool subgroup_shuffle = false;  // compute shaders may use subgroupShuffle (GroupNonUniformShuffle)
  double timestamp_period_ns = 0.0;
  bool timestamps = false;  // the compute queue supports timestamp queries
};

struct ValidationMessage {
  bool is_error = false;         // severity ERROR (otherwise WARNING)
  std::string id;                // the layer's message id name, e.g. "SYNC-HAZARD-READ-AFTER-WRITE"
  std::string text;
};

// How the per-distance biases (T5, ALiBi, Fourier) write their [.., Q, K] output. Every output row
// is a window of one per-distance row, so it can be a compute shader's stores or a transfer copy of
// the window. CPU devices run a copy as a memcpy on their queue thread, which writes faster than
// their shader stores; GPUs do better with the shader. Adds into logits always use the shader.
enum class DistanceExpansion {
  Auto,    // copies on CPU devices with at most 4 threads and rows of at least 1 KiB; shader otherwise
  Shader,  // always the compute shader
  Copies,  // transfer copies whenever the output buffer allows transfer writes
};

struct ContextOptions {
  // Device selector: an index into the device list, or a case-insensitive substring of the device
  // name. Empty: the RELPOS_DEVICE environment variable, then the first discrete GPU, integrated
  // GPU, virtual GPU, CPU device, in that order.
  std::string device;
  // Enable VK_LAYER_KHRONOS_validation (with synchronization validation) and a debug messenger.
  // RELPOS_VALIDATION=1 in the environment enables it too. Only for contexts relpos creates.
  bool validation = false;
  // Receives every validation warning and error. Default: print to stderr.
  std::function<void(const ValidationMessage&)> on_validation_message;
  // Lower the device's limits (0 = keep). For tests of the split paths on small tensors.
  std::uint64_t max_storage_buffer_range = 0;
  std::uint32_t max_workgroup_count = 0;
  // Never map MemoryUse::Device buffers, even where device memory is host-visible, so uploads and
  // downloads take the staging path a discrete GPU uses. For tests of that path.
  bool staging_only = false;
  // Treat the device as one without subgroup shuffles, so that the kernels such devices get run.
  // For tests of those kernels on devices that have shuffles.
  bool no_subgroup_shuffles = false;
  DistanceExpansion distance_expansion = DistanceExpansion::Auto;
};

// An application's own Vulkan objects. relpos loads its own function pointers for them (volk's
// per-device table, under private names) and never touches the application's.
struct AdoptedVulkan {
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical_device = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;  // must support compute
  std::uint32_t queue_family = 0;
  // The loader entry the application uses; null: relpos opens the system Vulkan loader.
  PFN_vkGetInstanceProcAddr get_instance_proc_addr = nullptr;
};

class Context {
 public:
  explicit Context(const ContextOptions& options = {});
  // Adopt an application's device. The application keeps ownership: relpos destroys only what it
  // created (its pools, pipelines, buffers). The application must not use the queue from another
  // thread while relpos submits to it.
  explicit Context(const AdoptedVulkan& app, const ContextOptions& options = {});
  ~Context();
  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // The devices of the system loader, and which one a selector would pick.
  static std::vector<DeviceInfo> devices();
  static std::uint32_t pick_device(const std::vector<DeviceInfo>& devices, const std::string& selector);

  const DeviceInfo& device_info() const;
  const DeviceLimits& limits() const;
  DistanceExpansion distance_expansion() const;
  bool validation_enabled() const;
  // Validation warnings and errors received so far.
  std::uint64_t validation_message_count() const;

  VkDevice vk_device() const;
  VkPhysicalDevice vk_physical_device() const;
  VkQueue vk_queue() const;
  std::uint32_t queue_family() const;

  // Waits until the device is idle.
  void wait_idle();

  const std::shared_ptr<detail::Device>& device() const { return device_; }

 private:
  std::shared_ptr<detail::Device> device_;
};

}  // namespace relpos
