#pragma once
// The Vulkan context relpos runs on: either one it creates (picking a device), or one adopted from
// an application that already has its own instance, device and queue.
#include <vulkan/vulkan_core.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "relpos/tuning.hpp"

namespace relpos {

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

// A PCI vendor id (DeviceLimits::vendor_id).
inline constexpr std::uint32_t kVendorNvidia = 0x10de;

// The limits relpos plans its dispatches with: read from the device, never assumed.
struct DeviceLimits {
  std::uint64_t max_storage_buffer_range = 0;
  std::uint64_t min_storage_buffer_offset_alignment = 0;
  std::uint32_t max_workgroup_count[3] = {0, 0, 0};
  std::uint32_t max_workgroup_size[3] = {0, 0, 0};
  std::uint32_t max_workgroup_invocations = 0;
  std::uint32_t max_shared_memory_bytes = 0;
  std::uint32_t max_push_constants_size = 0;
  std::uint32_t max_storage_buffers_per_stage = 0;  // maxPerStageDescriptorStorageBuffers (fused attention binds 12)
  std::uint64_t max_memory_allocation_size = 0;
  // The compute subgroup size kernels are planned with: the device's, or where its subgroups have
  // several sizes, the one relpos requires of the pipelines that use subgroup operations.
  std::uint32_t subgroup_size = 0;
  // Compute shaders may use subgroupShuffle (GroupNonUniformShuffle), at subgroup_size.
  bool subgroup_shuffle = false;
  // Invocations the device keeps resident at once (its cores times the subgroups each holds times
  // their width), where it says: VK_NV_shader_sm_builtins or VK_AMD_shader_core_properties. 0: not
  // known.
  std::uint64_t resident_invocations = 0;
  // The PCI vendor (VkPhysicalDeviceProperties::vendorID): kernels' register budgets follow the
  // vendor's compiler.
  std::uint32_t vendor_id = 0;
  double timestamp_period_ns = 0.0;
  bool timestamps = false;  // the compute queue supports timestamp queries
};

struct ValidationMessage {
  bool is_error = false;         // severity ERROR (otherwise WARNING)
  std::string id;                // the layer's message id name, e.g. "SYNC-HAZARD-READ-AFTER-WRITE"
  std::string text;
};

struct ContextOptions {
  // Device selector: an index into the device list, or a case-insensitive substring of the device
  // name. Empty: the RELPOS_DEVICE environment variable, then the first discrete GPU, integrated
  // GPU, virtual GPU, CPU device, in that order.
  std::string device;
  // Enable VK_LAYER_KHRONOS_validation (with synchronization validation) and a debug messenger.
  // RELPOS_VALIDATION=1 in the environment enables it too. Only for contexts relpos creates.
  bool validation = false;
  // Receives every validation warning and error, on whichever thread made the call that caused it
  // (so it must be thread-safe when several threads use the Context). Default: print to stderr.
  std::function<void(const ValidationMessage&)> on_validation_message;
  // How relpos shapes its work on the device (kernel classes, the bias expansion, survey mode): the
  // defaults suit every device; relpos/tuning.hpp says what each knob does.
  Tuning tuning;
  // A directory for a persistent pipeline cache: the driver's compiled pipelines are read from a
  // file there (one per device and driver version, named by its pipelineCacheUUID) when the
  // Context starts, and written back (atomically, only when pipelines were added) when it ends or on
  // save_pipeline_cache(). A corrupt, foreign or unreadable file is ignored with a warning. Empty:
  // no persistent cache. The CLI uses $XDG_CACHE_HOME/relpos or ~/.cache/relpos.
  std::string pipeline_cache_path;
  // Receives relpos's warnings (a pipeline cache file ignored or not saved), on the thread that
  // caused them. Default: print to stderr.
  std::function<void(const std::string&)> on_warning;
};

// An application's own Vulkan objects. relpos loads its own function pointers for them (under
// private names, per Context) and never touches the application's.
//
// What relpos requires of them (the Context constructor refuses with InvalidArgument otherwise):
// - the instance created with VkApplicationInfo::apiVersion >= VK_API_VERSION_1_1, stated in
//   `api_version` (relpos calls Vulkan 1.1 functions and loads SPIR-V 1.3 modules);
// - a physical device reporting apiVersion >= 1.1;
// - `queue` taken from `queue_family`, a family with VK_QUEUE_COMPUTE_BIT (compute implies
//   transfer commands, which relpos also records);
// - a HOST_VISIBLE | HOST_COHERENT memory type (uploads, downloads, host buffers).
// No device features or extensions are needed: relpos's shaders use only Vulkan 1.1 core
// (subgroup shuffles where the device reports them for compute). Timestamps are optional.
// VK_KHR_push_descriptor is wanted where steps are recorded while earlier ones are pending (see
// push_descriptors).
// On a device whose compute subgroups have several sizes (Intel: 8 to 32; AMD RDNA: 32 or 64)
// relpos uses subgroup shuffles only where it can require a size: set subgroup_size_control when
// the device was created with subgroupSizeControl and computeFullSubgroups enabled (Vulkan 1.3's
// VkPhysicalDeviceVulkan13Features, or VK_EXT_subgroup_size_control's features); without, such a
// device gets kernels that do not shuffle (correct, and slower where they decode).
// The application keeps ownership: relpos destroys only what it created (its pools, pipelines,
// buffers, events), and the application destroys the Context before its device.
struct AdoptedVulkan {
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical_device = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;  // must support compute
  std::uint32_t queue_family = 0;
  // The loader entry the application uses; null: relpos opens the system Vulkan loader.
  PFN_vkGetInstanceProcAddr get_instance_proc_addr = nullptr;
  // The VkApplicationInfo::apiVersion the instance was created with (VK_API_VERSION_1_0 when it
  // was created without a VkApplicationInfo). Required: 0 is refused.
  std::uint32_t api_version = 0;
  // The device was created with subgroupSizeControl and computeFullSubgroups enabled: relpos then
  // pins a subgroup size where there are several, and asks full subgroups where there is one.
  bool subgroup_size_control = false;
  // The device was created with VK_KHR_push_descriptor enabled (NVIDIA, AMD, Intel, lavapipe and
  // MoltenVK have it; core in Vulkan 1.4). relpos then records every binding into the command
  // buffer and keeps no descriptor set, so an engine may record a step while the command buffers of
  // earlier steps are still pending. Without it, relpos writes a step's descriptor sets again once
  // that step's end event is set, which Vulkan allows only after its command buffer left the
  // pending state: then record a step only once the command buffer of the step before has
  // completed (its fence), or keep each step in flight on a plan or Recorder of its own. (Under the
  // validation layer's GPU-assisted mode, asked for in VK_LAYER_ENABLES, relpos binds sets
  // anyway: that mode misreads pushed descriptors.)
  bool push_descriptors = false;
  // The application's lock for `queue` (VkQueue is externally synchronised). relpos holds it around
  // each vkQueueSubmit and vkQueueWaitIdle; the application must hold it around its own uses of
  // the queue, and several Contexts adopting one queue must all be given the same mutex. Do not
  // hold it while calling relpos (uploads and submissions lock it). Null: relpos locks a mutex of
  // its own, and the application must not use the queue while relpos may.
  std::mutex* queue_mutex = nullptr;
};

// Threads: a Context may be shared by any number of threads, each recording its own Recorder
// (a Recorder is used by one thread at a time); creating buffers, recording, submitting,
// uploading and downloading from several threads at once is safe. Several Contexts may be
// created and used at once, and several may adopt one queue when given the same queue_mutex.
// A Context itself (construction, destruction, move) is not to be used concurrently.
// Lifetimes: buffers, Recorders and plans keep the Context's device, not its address, so they work
// on after the Context is moved into another variable or destroyed (the device goes with the last
// of them). A moved-from Context holds no device: using it throws InvalidArgument, as using a
// moved-from Recorder, plan or RingRank does.
class Context {
 public:
  explicit Context(const ContextOptions& options = {});
  // Adopt an application's device (see AdoptedVulkan for what it must provide). Destroy the
  // Context only after every command buffer holding relpos's commands has finished executing (or
  // was never submitted): an adopted device is the application's to wait for.
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
  // The options' tuning, with Tuning::kernels resolved (Auto: Cpu or Gpu by the device type).
  const Tuning& tuning() const;
  bool validation_enabled() const;
  // Validation warnings and errors received so far.
  std::uint64_t validation_message_count() const;
  // Writes the persistent pipeline cache now (ContextOptions::pipeline_cache_path; nothing without
  // one, or when no pipeline was added since it was read or last written): for an application that
  // keeps its Context for the whole process. Failures are warnings.
  void save_pipeline_cache();

  VkDevice vk_device() const;
  VkPhysicalDevice vk_physical_device() const;
  VkQueue vk_queue() const;
  std::uint32_t queue_family() const;

  // Waits until the queue is idle (under the queue lock), then takes back what destroyed Recorders
  // left for command buffers that have executed since (for later recordings to reuse).
  void wait_idle();
  // The application has reset or freed `command_buffer` (so it is pending nowhere), or will never
  // submit it: what Recorders on it left is taken back at once, for later recordings to reuse,
  // instead of waiting for events the command buffer will never set; the plans' steps recorded
  // into it free their descriptor sets for the plans' next steps alike.
  void release_recordings(VkCommandBuffer command_buffer);

 private:
  friend class Buffer;          // holds the Device, which outlives the Context while buffers do
  friend struct RuntimeAccess;  // the runtime's way in (not installed)
  struct Device;                // everything the Context owns; the runtime defines it
  // A second Context on a Device: a Recorder's own, which the Device outlives alike.
  explicit Context(std::shared_ptr<Device> device);
  std::shared_ptr<Device> device_;
};

}  // namespace relpos
