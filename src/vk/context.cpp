#include "relpos/context.hpp"

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "params/checks.hpp"
#include "vk/access.hpp"
#include "vk/device.hpp"
#include "vk/pipeline_cache_file.hpp"

namespace relpos {
namespace detail {

// Whether dispatches may push their bindings on `d` (read_limits done): the device allows
// kMaxBindings of them, and the validation layer's GPU-assisted mode is not asked for through the
// environment (it misreads pushed descriptors: reports them uninitialised, and the dispatches then
// go wrong, Vulkan-ValidationLayers issues 5321 and 11433; relpos binds descriptor sets under it).
bool can_push_descriptors(const Device& d) {
  if (d.max_push_descriptors < kMaxBindings) return false;
  for (const char* name : {"VK_LAYER_ENABLES", "VK_KHRONOS_VALIDATION_ENABLES"})
    if (const char* v = std::getenv(name); v && std::strstr(v, "GPU_ASSISTED")) return false;
  return true;
}
namespace {

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

std::string version_name(std::uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v));
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v || std::strcmp(v, "0") == 0) return false;
  // Any other word would read as "on" (false, no, off included): refused, as RELPOS_KERNELS is.
  if (std::strcmp(v, "1") != 0) throw InvalidArgument(std::string(name) + " = " + v + ": must be 0 or 1");
  return true;
}

// Before the instance is made. The ops test for one value of each and take any other for the rest:
// an unknown kernel class would even mix the two classes' plans.
void require_tuning(const Tuning& t) {
  require_one_of(t.distance_expansion, {DistanceExpansion::Auto, DistanceExpansion::Shader, DistanceExpansion::Copies}, "tuning.distance_expansion",
                 "must be Auto, Shader or Copies");
  require_one_of(t.kernels, {Kernels::Auto, Kernels::Cpu, Kernels::Gpu}, "tuning.kernels", "must be Auto, Cpu or Gpu");
}

// Auto resolved: RELPOS_KERNELS (auto, cpu or gpu) where set, then by the device type.
Kernels resolve_kernels(Kernels chosen, DeviceType type) {
  if (chosen == Kernels::Auto) {
    if (const char* v = std::getenv("RELPOS_KERNELS"); v && *v) {
      const std::optional<Kernels> named = kernels_from_name(v);
      if (!named) throw InvalidArgument(std::string("RELPOS_KERNELS = ") + v + ": must be auto, cpu or gpu");
      chosen = *named;
    }
  }
  if (chosen == Kernels::Auto) chosen = type == DeviceType::Cpu ? Kernels::Cpu : Kernels::Gpu;
  return chosen;
}

VKAPI_ATTR VkBool32 VKAPI_CALL debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                              VkDebugUtilsMessageTypeFlagsEXT,
                                              const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  // The loader's notices of the environment (VK_INSTANCE_LAYERS set, a layer it adds) are no
  // finding about relpos's use of Vulkan: not counted, or `relpos --validation check` failed with a
  // layer enabled both ways. Its errors are.
  const bool loader = data->pMessageIdName && std::string_view(data->pMessageIdName) == "Loader Message";
  const bool environment = data->pMessage && std::string_view(data->pMessage).starts_with("env var '");
  if (loader && environment && !(severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT)) return VK_FALSE;
  ValidationMessage m;
  m.is_error = (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) != 0;
  m.id = data->pMessageIdName ? data->pMessageIdName : "";
  m.text = data->pMessage ? data->pMessage : "";
  static_cast<Device*>(user)->report(m);
  return VK_FALSE;
}

DeviceType to_type(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return DeviceType::Discrete;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return DeviceType::Integrated;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return DeviceType::Virtual;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return DeviceType::Cpu;
    default: return DeviceType::Other;
  }
}

std::uint32_t compute_queue_family(const InstanceFunctions& fn, VkPhysicalDevice pd) {
  std::uint32_t n = 0;
  fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> fams(n);
  fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, fams.data());
  // Prefer a compute family without graphics (async compute queues), then any with compute.
  for (std::uint32_t i = 0; i < n; ++i)
    if ((fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(fams[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) return i;
  for (std::uint32_t i = 0; i < n; ++i)
    if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return i;
  return UINT32_MAX;
}

DeviceInfo describe(const InstanceFunctions& fn, VkPhysicalDevice pd, std::uint32_t index, std::uint32_t instance_version) {
  VkPhysicalDeviceProperties p{};
  fn.vkGetPhysicalDeviceProperties(pd, &p);
  DeviceInfo d;
  d.index = index;
  d.name = p.deviceName;
  d.type = to_type(p.deviceType);
  d.vendor_id = p.vendorID;
  d.device_id = p.deviceID;
  d.api_version = p.apiVersion;
  d.has_compute = compute_queue_family(fn, pd) != UINT32_MAX;
  if (instance_version >= VK_API_VERSION_1_2 && p.apiVersion >= VK_API_VERSION_1_2) {
    VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &drv};
    fn.vkGetPhysicalDeviceProperties2(pd, &p2);
    d.driver = std::string(drv.driverName) + " " + drv.driverInfo;
  }
  return d;
}

bool has_layer(const InstanceFunctions& fn, const char* name) {
  std::uint32_t n = 0;
  fn.vkEnumerateInstanceLayerProperties(&n, nullptr);
  std::vector<VkLayerProperties> layers(n);
  fn.vkEnumerateInstanceLayerProperties(&n, layers.data());
  return std::any_of(layers.begin(), layers.end(), [&](auto& l) { return std::strcmp(l.layerName, name) == 0; });
}

bool has_instance_extension(const InstanceFunctions& fn, const char* name) {
  std::uint32_t n = 0;
  fn.vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  fn.vkEnumerateInstanceExtensionProperties(nullptr, &n, exts.data());
  return std::any_of(exts.begin(), exts.end(), [&](auto& e) { return std::strcmp(e.extensionName, name) == 0; });
}

// Creates an instance (in `d`, with its destruction in d.cleanups); with validation, the Khronos
// layer with synchronization validation and a messenger reporting into `d`. Returns the apiVersion
// it was created with.
std::uint32_t create_instance(Device& d, bool validation) {
  InstanceFunctions& fn = d.fn;
  fn.load_global(nullptr);
  const std::uint32_t version = fn.loader_version();
  if (version < VK_API_VERSION_1_1) throw VulkanError("the Vulkan loader supports only Vulkan 1.0; relpos needs 1.1");
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "relpos";
  app.pEngineName = "relpos";
  app.apiVersion = std::min(version, VK_API_VERSION_1_3);

  std::vector<const char*> layers, exts;
  bool portability = has_instance_extension(fn, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
  if (portability) exts.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
  VkValidationFeatureEnableEXT enables[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = enables;
  VkDebugUtilsMessengerCreateInfoEXT dbg{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  dbg.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  dbg.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
  dbg.pfnUserCallback = debug_callback;
  dbg.pUserData = &d;
  if (validation) {
    if (!has_layer(fn, kValidationLayer))
      throw VulkanError("validation requested but VK_LAYER_KHRONOS_validation is not installed (Debian: vulkan-validationlayers)");
    layers.push_back(kValidationLayer);
    exts.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    features.pNext = &dbg;
  }
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pNext = validation ? &features : nullptr;
  ci.flags = portability ? VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR : 0;
  ci.pApplicationInfo = &app;
  ci.enabledLayerCount = static_cast<std::uint32_t>(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  ci.enabledExtensionCount = static_cast<std::uint32_t>(exts.size());
  ci.ppEnabledExtensionNames = exts.data();
  VkInstance instance = VK_NULL_HANDLE;
  vk_check(fn.vkCreateInstance(&ci, nullptr, &instance), "vkCreateInstance");
  d.instance = instance;
  // Resolve vkDestroyInstance before anything can throw, so the cleanup can run.
  auto destroy = reinterpret_cast<PFN_vkDestroyInstance>(fn.vkGetInstanceProcAddr(instance, "vkDestroyInstance"));
  if (!destroy) throw VulkanError("the Vulkan loader has no vkDestroyInstance");
  d.cleanups.push_back([instance, destroy] { destroy(instance, nullptr); });
  fn.load_instance(instance);
  if (validation) {
    if (!fn.vkCreateDebugUtilsMessengerEXT || !fn.vkDestroyDebugUtilsMessengerEXT)
      throw VulkanError("the Vulkan loader has no vkCreateDebugUtilsMessengerEXT although VK_EXT_debug_utils was enabled");
    VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
    vk_check(fn.vkCreateDebugUtilsMessengerEXT(instance, &dbg, nullptr, &messenger), "vkCreateDebugUtilsMessengerEXT");
    d.cleanups.push_back([instance, messenger, destroy_messenger = fn.vkDestroyDebugUtilsMessengerEXT] {
      destroy_messenger(instance, messenger, nullptr);
    });
  }
  return app.apiVersion;
}

std::vector<VkPhysicalDevice> physical_devices(const InstanceFunctions& fn, VkInstance instance) {
  std::uint32_t n = 0;
  vk_check(fn.vkEnumeratePhysicalDevices(instance, &n, nullptr), "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> pds(n);
  vk_check(fn.vkEnumeratePhysicalDevices(instance, &n, pds.data()), "vkEnumeratePhysicalDevices");
  pds.resize(n);
  return pds;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool device_has_extension(const Device& d, const char* name) {
  std::uint32_t n = 0;
  d.fn.vkEnumerateDeviceExtensionProperties(d.physical, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> avail(n);
  d.fn.vkEnumerateDeviceExtensionProperties(d.physical, nullptr, &n, avail.data());
  return std::any_of(avail.begin(), avail.end(), [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

void read_limits(Device& d) {
  const InstanceFunctions& fn = d.fn;
  VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &sub};
  VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  sub.pNext = &m3;
  // The device's cores, where an extension states them (chained only where the device has it).
  VkPhysicalDeviceShaderSMBuiltinsPropertiesNV sm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
  VkPhysicalDeviceShaderCorePropertiesAMD core{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD};
  VkPhysicalDevicePushDescriptorPropertiesKHR push{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PUSH_DESCRIPTOR_PROPERTIES_KHR};
  const bool has_sm = device_has_extension(d, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME);
  const bool has_core = device_has_extension(d, VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME);
  const bool has_push = device_has_extension(d, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
  void** tail = &m3.pNext;
  if (has_sm) *std::exchange(tail, &sm.pNext) = &sm;
  if (has_core) *std::exchange(tail, &core.pNext) = &core;
  if (has_push) *std::exchange(tail, &push.pNext) = &push;
  fn.vkGetPhysicalDeviceProperties2(d.physical, &p2);
  d.max_push_descriptors = has_push ? push.maxPushDescriptors : 0;
  const VkPhysicalDeviceLimits& l = p2.properties.limits;
  DeviceLimits& o = d.limits;
  o.max_storage_buffer_range = l.maxStorageBufferRange;
  o.min_storage_buffer_offset_alignment = std::max<VkDeviceSize>(l.minStorageBufferOffsetAlignment, 4);
  for (int i = 0; i < 3; ++i) {
    o.max_workgroup_count[i] = l.maxComputeWorkGroupCount[i];
    o.max_workgroup_size[i] = l.maxComputeWorkGroupSize[i];
  }
  o.max_workgroup_invocations = l.maxComputeWorkGroupInvocations;
  o.max_shared_memory_bytes = l.maxComputeSharedMemorySize;
  o.max_push_constants_size = l.maxPushConstantsSize;
  o.max_storage_buffers_per_stage = l.maxPerStageDescriptorStorageBuffers;
  o.max_memory_allocation_size = m3.maxMemoryAllocationSize;
  o.subgroup_size = sub.subgroupSize;
  o.subgroup_shuffle = (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0 &&
                       (sub.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) != 0;
  if (has_sm) o.resident_invocations = std::uint64_t{sm.shaderSMCount} * sm.shaderWarpsPerSM * sub.subgroupSize;
  if (has_core)
    o.resident_invocations = std::uint64_t{core.shaderEngineCount} * core.shaderArraysPerEngineCount * core.computeUnitsPerShaderArray *
                             core.simdPerComputeUnit * core.wavefrontsPerSimd * core.wavefrontSize;
  o.vendor_id = p2.properties.vendorID;
  o.timestamp_period_ns = l.timestampPeriod;
  std::uint32_t n = 0;
  fn.vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &n, nullptr);
  std::vector<VkQueueFamilyProperties> fams(n);
  fn.vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &n, fams.data());
  o.timestamps = d.queue_family < n && fams[d.queue_family].timestampValidBits > 0 && l.timestampPeriod > 0;
  fn.vkGetPhysicalDeviceMemoryProperties(d.physical, &d.memory);
}

// The range of a device's compute subgroup sizes, and whether a pipeline can require one with full
// subgroups (Vulkan 1.3's subgroupSizeControl and computeFullSubgroups, or
// VK_EXT_subgroup_size_control's on a Vulkan 1.1 or 1.2 device).
struct SubgroupSizes {
  std::uint32_t min = 0, max = 0;  // 0: the device states no range (Vulkan 1.1's single size)
  std::uint32_t max_workgroup_subgroups = 0;  // maxComputeWorkgroupSubgroups
  bool control = false;
  bool extension = false;  // through VK_EXT_subgroup_size_control
};
SubgroupSizes subgroup_sizes(const Device& d, std::uint32_t instance_version) {
  SubgroupSizes s;
  const bool core = instance_version >= VK_API_VERSION_1_3 && d.info.api_version >= VK_API_VERSION_1_3;
  const bool extension = !core && device_has_extension(d, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  if (!(core || extension) || !d.fn.vkGetPhysicalDeviceFeatures2) return s;
  VkPhysicalDeviceSubgroupSizeControlProperties props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &props};
  d.fn.vkGetPhysicalDeviceProperties2(d.physical, &p2);
  VkPhysicalDeviceSubgroupSizeControlFeatures f{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f};
  d.fn.vkGetPhysicalDeviceFeatures2(d.physical, &f2);
  s.min = props.minSubgroupSize;
  s.max = props.maxSubgroupSize;
  s.max_workgroup_subgroups = props.maxComputeWorkgroupSubgroups;
  s.control = f.subgroupSizeControl && f.computeFullSubgroups && (props.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
  s.extension = !core;
  return s;
}

// The kernels that exchange values between lanes (shuffles) plan with limits.subgroup_size and
// number their lanes by it, so it must be the size their pipelines run at. Where a device's
// compute subgroups have several sizes, a pipeline without a required size may run at any of them
// (Intel's compiler picks SIMD8, 16 or 32 per shader, while the advertised size is 32), so the
// size is pinned: the smallest where it is at most 16 (Intel: 8 of 8-32 on Xe-HPG, 16 of 16-32 on
// Xe2, whose register file per lane halves as the width doubles: the decoding kernels, the GPU
// kernels that shuffle, spilled at SIMD16 on dg2), else the advertised one (AMD: 64 of 32-64,
// whose registers per lane do not depend on the wave size). Without the control, no kernel may
// depend on the size: subgroup shuffles are off. A device of one size with the control asks full
// subgroups of its pipelines (Device::full_subgroup_size).
void pin_subgroup_size(Device& d, const SubgroupSizes& s, bool control_enabled) {
  DeviceLimits& o = d.limits;
  if (s.min == 0) return;
  if (s.min == s.max) {
    if (control_enabled) d.full_subgroup_size = s.max;
    return;
  }
  if (!control_enabled) {
    o.subgroup_shuffle = false;
    return;
  }
  const std::uint32_t size = s.min <= 16 ? s.min : std::clamp(o.subgroup_size, s.min, s.max);
  d.required_subgroup_size = size;
  d.max_workgroup_subgroups = s.max_workgroup_subgroups;
  o.subgroup_size = size;
}

// relpos needs a host-visible coherent memory type (uploads, downloads, MemoryUse::Host buffers,
// staging) and some memory type for device buffers. Checked before anything is allocated, so that
// a device without them (RADV's null hardware has none) gives this error instead of a failure
// deep inside a driver.
void require_usable_memory(const Device& d) {
  constexpr auto kHost = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const auto& m = d.memory;
  bool host = false;
  for (std::uint32_t i = 0; i < m.memoryTypeCount; ++i) host = host || (m.memoryTypes[i].propertyFlags & kHost) == kHost;
  if (!host)
    throw VulkanError("device " + std::to_string(d.info.index) + " (" + d.info.name + ") has no HOST_VISIBLE | HOST_COHERENT memory type (" +
                      std::to_string(m.memoryTypeCount) + " memory types in all): relpos needs one for uploads, downloads and host buffers");
}

void create_runtime_objects(Device& d, const ContextOptions& opt) {
  VkPipelineCacheCreateInfo cci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  std::vector<char> initial;
  if (!opt.pipeline_cache_path.empty()) {
    VkPhysicalDeviceProperties props{};
    d.fn.vkGetPhysicalDeviceProperties(d.physical, &props);
    d.pipeline_cache_file = pipeline_cache_file(opt.pipeline_cache_path, props);
    initial = read_pipeline_cache(d.pipeline_cache_file, props, d.warn);
    cci.initialDataSize = initial.size();
    cci.pInitialData = initial.data();
  }
  VkResult r = d.vk.vkCreatePipelineCache(d.device, &cci, nullptr, &d.pipeline_cache);
  if (r != VK_SUCCESS && !initial.empty()) {
    d.warn("pipeline cache " + d.pipeline_cache_file.string() + ": the driver refused its contents (" + std::to_string(r) +
           "); starting with an empty cache");
    initial.clear();
    cci.initialDataSize = 0;
    cci.pInitialData = nullptr;
    r = d.vk.vkCreatePipelineCache(d.device, &cci, nullptr, &d.pipeline_cache);
  }
  vk_check(r, "vkCreatePipelineCache");
  d.pipeline_cache_saved_bytes = initial.size();
  d.cleanups.push_back([&d] {
    try {
      d.save_pipeline_cache();
    } catch (const std::exception& e) {  // a destructor's work: never thrown on
      d.warn(std::string("pipeline cache not saved: ") + e.what());
    }
    for (auto& [key, p] : d.pipelines) {
      d.vk.vkDestroyPipeline(d.device, p.pipeline, nullptr);
      d.vk.vkDestroyPipelineLayout(d.device, p.layout, nullptr);
    }
    d.pipelines.clear();
    for (auto& [bindings, layout] : d.set_layouts) d.vk.vkDestroyDescriptorSetLayout(d.device, layout, nullptr);
    d.set_layouts.clear();
    d.vk.vkDestroyPipelineCache(d.device, d.pipeline_cache, nullptr);
  });
  // Retired recordings are freed before the pipelines and the device (last in, first out).
  d.cleanups.push_back([&d] { d.free_retired(true); });
}

void set_message_handler(Device& d, const ContextOptions& opt) {
  d.warn = opt.on_warning;
  if (!d.warn) d.warn = [](const std::string& text) { std::fprintf(stderr, "relpos warning: %s\n", text.c_str()); };
  d.on_message = opt.on_validation_message;
  if (!d.on_message)
    d.on_message = [](const ValidationMessage& m) {
      std::fprintf(stderr, "relpos validation %s [%s]: %s\n", m.is_error ? "error" : "warning", m.id.c_str(), m.text.c_str());
    };
}

}  // namespace

void Device::report(const ValidationMessage& m) {
  validation_messages.fetch_add(1);
  if (on_message) on_message(m);
}

void Device::save_pipeline_cache() {
  if (pipeline_cache_file.empty() || !pipeline_cache) return;
  std::lock_guard lock(pipeline_cache_save_mutex);
  std::size_t size = 0;
  if (vk.vkGetPipelineCacheData(device, pipeline_cache, &size, nullptr) != VK_SUCCESS || size == pipeline_cache_saved_bytes) return;
  std::vector<char> data(size);
  if (vk.vkGetPipelineCacheData(device, pipeline_cache, &size, data.data()) != VK_SUCCESS) return;
  data.resize(size);
  write_pipeline_cache(pipeline_cache_file, data, warn);
  pipeline_cache_saved_bytes = size;
}

Device::~Device() {
  // relpos's own submissions were all waited for. On a device relpos created, an application may
  // still have recorded relpos's commands into its own command buffers: wait for the device (its
  // one queue is relpos's) before anything is destroyed. An adopted device is the application's
  // to wait for: it destroys the Context only after its command buffers finished (context.hpp).
  if (owns_device && vk.vkDeviceWaitIdle && !tuning.compile_only) {  // compile-only: nothing was submitted
    auto lock = lock_queue();
    vk.vkDeviceWaitIdle(device);
  }
  for (auto it = cleanups.rbegin(); it != cleanups.rend(); ++it) (*it)();
}

}  // namespace detail

std::optional<Kernels> kernels_from_name(std::string_view name) {
  if (name == "auto") return Kernels::Auto;
  if (name == "cpu") return Kernels::Cpu;
  if (name == "gpu") return Kernels::Gpu;
  return std::nullopt;
}

using detail::Device;
using detail::vk_check;

std::string_view device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::Discrete: return "discrete GPU";
    case DeviceType::Integrated: return "integrated GPU";
    case DeviceType::Virtual: return "virtual GPU";
    case DeviceType::Cpu: return "CPU";
    case DeviceType::Other: return "other";
  }
  return "other";
}

std::vector<DeviceInfo> Context::devices() {
  Device tmp;  // owns the temporary instance
  const std::uint32_t version = detail::create_instance(tmp, false);
  std::vector<DeviceInfo> out;
  auto pds = detail::physical_devices(tmp.fn, tmp.instance);
  for (std::uint32_t i = 0; i < pds.size(); ++i) out.push_back(detail::describe(tmp.fn, pds[i], i, version));
  return out;
}

std::uint32_t Context::pick_device(const std::vector<DeviceInfo>& devices, const std::string& selector_in) {
  std::string selector = selector_in;
  if (selector.empty())
    if (const char* env = std::getenv("RELPOS_DEVICE")) selector = env;
  auto usable = [](const DeviceInfo& d) { return d.has_compute && d.api_version >= VK_API_VERSION_1_1; };
  if (!selector.empty()) {
    bool numeric = std::all_of(selector.begin(), selector.end(), [](unsigned char c) { return std::isdigit(c); });
    if (numeric) {
      // Digits only, so the one failure is a number too large for any index (stoul would throw).
      std::uint64_t idx = 0;
      const bool fits = std::from_chars(selector.data(), selector.data() + selector.size(), idx).ec == std::errc();
      if (!fits || idx >= devices.size())
        throw InvalidArgument("device index " + selector + " is out of range: " + std::to_string(devices.size()) + " device(s) found");
      if (!usable(devices[idx])) throw InvalidArgument("device " + selector + " (" + devices[idx].name + ") has no Vulkan 1.1 compute queue");
      return static_cast<std::uint32_t>(idx);
    }
    for (const auto& d : devices)
      if (usable(d) && detail::lower(d.name).find(detail::lower(selector)) != std::string::npos) return d.index;
    throw InvalidArgument("no Vulkan compute device's name contains \"" + selector + "\" (see `relpos devices`)");
  }
  for (DeviceType want : {DeviceType::Discrete, DeviceType::Integrated, DeviceType::Virtual, DeviceType::Cpu, DeviceType::Other})
    for (const auto& d : devices)
      if (d.type == want && usable(d)) return d.index;
  throw VulkanError("no Vulkan device with a compute queue and Vulkan 1.1 found");
}

Context::Context(const ContextOptions& opt) : device_(std::make_shared<Device>()) {
  detail::require_tuning(opt.tuning);
  Device& d = *device_;
  d.validation = opt.validation || detail::env_flag("RELPOS_VALIDATION");
  detail::set_message_handler(d, opt);
  const std::uint32_t version = detail::create_instance(d, d.validation);
  auto pds = detail::physical_devices(d.fn, d.instance);
  std::vector<DeviceInfo> infos;
  for (std::uint32_t i = 0; i < pds.size(); ++i) infos.push_back(detail::describe(d.fn, pds[i], i, version));
  std::uint32_t idx = pick_device(infos, opt.device);
  d.physical = pds[idx];
  d.info = infos[idx];
  d.queue_family = detail::compute_queue_family(d.fn, d.physical);
  detail::read_limits(d);
  d.tuning.distance_expansion = opt.tuning.distance_expansion;
  d.tuning.kernels = detail::resolve_kernels(opt.tuning.kernels, d.info.type);
  d.tuning.compile_only = opt.tuning.compile_only;
  if (!d.tuning.compile_only) detail::require_usable_memory(d);

  float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = d.queue_family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  std::vector<const char*> exts;
  {
    std::uint32_t n = 0;
    d.fn.vkEnumerateDeviceExtensionProperties(d.physical, nullptr, &n, nullptr);
    std::vector<VkExtensionProperties> avail(n);
    d.fn.vkEnumerateDeviceExtensionProperties(d.physical, nullptr, &n, avail.data());
    for (auto& e : avail) {
      if (std::strcmp(e.extensionName, "VK_KHR_portability_subset") == 0) exts.push_back("VK_KHR_portability_subset");
      if (opt.tuning.pipeline_statistics && std::strcmp(e.extensionName, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME) == 0) {
        exts.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
        d.tuning.pipeline_statistics = true;
      }
    }
  }
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR executable_info{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
  executable_info.pipelineExecutableInfo = VK_TRUE;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  if (d.tuning.pipeline_statistics) dci.pNext = &executable_info;
  // Subgroup sizes pinned where they may vary, full subgroups asked where there is one
  // (pin_subgroup_size).
  const detail::SubgroupSizes sizes = detail::subgroup_sizes(d, version);
  VkPhysicalDeviceSubgroupSizeControlFeatures size_control{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
  if (sizes.control) {
    size_control.subgroupSizeControl = VK_TRUE;
    size_control.computeFullSubgroups = VK_TRUE;
    size_control.pNext = const_cast<void*>(dci.pNext);
    dci.pNext = &size_control;
    if (sizes.extension) exts.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  }
  detail::pin_subgroup_size(d, sizes, sizes.control);
  if (detail::can_push_descriptors(d)) {
    exts.push_back(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    d.push_descriptors = true;
  }
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = static_cast<std::uint32_t>(exts.size());
  dci.ppEnabledExtensionNames = exts.data();
  VkDevice device = VK_NULL_HANDLE;
  vk_check(d.fn.vkCreateDevice(d.physical, &dci, nullptr, &device), "vkCreateDevice");
  // The table is loaded before the device is recorded anywhere, so its destruction can use it.
  detail::load_device_table(d.fn, device, &d.vk);
  d.device = device;
  d.owns_device = true;
  d.cleanups.push_back([&d] { d.vk.vkDestroyDevice(d.device, nullptr); });
  d.vk.vkGetDeviceQueue(d.device, d.queue_family, 0, &d.queue);
  detail::create_runtime_objects(d, opt);
}

Context::Context(const AdoptedVulkan& app, const ContextOptions& opt) : device_(std::make_shared<Device>()) {
  detail::require_tuning(opt.tuning);
  if (!app.instance || !app.physical_device || !app.device || !app.queue)
    throw InvalidArgument("AdoptedVulkan: instance, physical_device, device and queue must all be set");
  const std::string version = detail::version_name(app.api_version);
  if (app.api_version == 0)
    throw InvalidArgument("AdoptedVulkan::api_version = 0: must be the VkApplicationInfo::apiVersion the instance was created with "
                          "(at least VK_API_VERSION_1_1)");
  if (app.api_version < VK_API_VERSION_1_1)
    throw InvalidArgument("AdoptedVulkan::api_version = " + version +
                          ": relpos needs an instance created with apiVersion 1.1 or later (it calls Vulkan 1.1 functions and "
                          "loads SPIR-V 1.3)");
  Device& d = *device_;
  detail::set_message_handler(d, opt);
  // relpos's own pointers for the application's instance and device (the application's are
  // separate symbols and are never touched).
  d.fn.load_global(app.get_instance_proc_addr);
  d.fn.load_instance(app.instance);
  d.instance = app.instance;
  d.physical = app.physical_device;
  d.queue_family = app.queue_family;
  if (app.queue_mutex) d.queue_mutex = app.queue_mutex;
  d.info = detail::describe(d.fn, d.physical, 0, app.api_version);
  if (d.info.api_version < VK_API_VERSION_1_1)
    throw InvalidArgument("AdoptedVulkan::physical_device (" + d.info.name + ") supports Vulkan " + detail::version_name(d.info.api_version) +
                          ": relpos needs 1.1 or later");
  {
    std::uint32_t n = 0;
    d.fn.vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &n, nullptr);
    std::vector<VkQueueFamilyProperties> fams(n);
    d.fn.vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &n, fams.data());
    if (app.queue_family >= n)
      throw InvalidArgument("AdoptedVulkan::queue_family = " + std::to_string(app.queue_family) + ": the device has " +
                            std::to_string(n) + " queue families");
    if (!(fams[app.queue_family].queueFlags & VK_QUEUE_COMPUTE_BIT))
      throw InvalidArgument("AdoptedVulkan::queue_family = " + std::to_string(app.queue_family) + ": the family has no compute support");
  }
  detail::read_limits(d);
  const detail::SubgroupSizes sizes = detail::subgroup_sizes(d, app.api_version);
  detail::pin_subgroup_size(d, sizes, app.subgroup_size_control && sizes.control);
  d.push_descriptors = app.push_descriptors && detail::can_push_descriptors(d);
  d.tuning.distance_expansion = opt.tuning.distance_expansion;
  d.tuning.kernels = detail::resolve_kernels(opt.tuning.kernels, d.info.type);
  detail::require_usable_memory(d);
  detail::load_device_table(d.fn, app.device, &d.vk);
  d.device = app.device;
  d.queue = app.queue;
  detail::create_runtime_objects(d, opt);
}

Context::Context(std::shared_ptr<Device> device) : device_(std::move(device)) {}
Context::~Context() = default;
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;

namespace {
detail::Device& live(const Context& ctx) { return RuntimeAccess::live_device(ctx); }
}  // namespace

const DeviceInfo& Context::device_info() const { return live(*this).info; }
const DeviceLimits& Context::limits() const { return live(*this).limits; }
const Tuning& Context::tuning() const { return live(*this).tuning; }
bool Context::validation_enabled() const { return live(*this).validation; }
std::uint64_t Context::validation_message_count() const { return live(*this).validation_messages.load(); }
void Context::save_pipeline_cache() { live(*this).save_pipeline_cache(); }
VkDevice Context::vk_device() const { return live(*this).device; }
VkPhysicalDevice Context::vk_physical_device() const { return live(*this).physical; }
VkQueue Context::vk_queue() const { return live(*this).queue; }
std::uint32_t Context::queue_family() const { return live(*this).queue_family; }

void Context::wait_idle() {
  auto& d = live(*this);
  {
    auto lock = d.lock_queue();
    vk_check(d.vk.vkQueueWaitIdle(d.queue), "vkQueueWaitIdle");
  }
  d.free_retired(false);
}

void Context::release_recordings(VkCommandBuffer command_buffer) {
  auto& d = live(*this);
  if (!command_buffer) return;
  d.note_release(command_buffer);  // for plans' steps recorded into it
  d.free_retired(false, command_buffer);
}

}  // namespace relpos
