#include "relpos/context.hpp"

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "vk/device.hpp"

namespace relpos {
namespace detail {
namespace {

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

std::once_flag g_loader_once;
VkResult g_loader_result = VK_ERROR_INITIALIZATION_FAILED;

void load_system_loader() {
  std::call_once(g_loader_once, [] { g_loader_result = volkInitialize(); });
  if (g_loader_result != VK_SUCCESS)
    throw VulkanError("no Vulkan loader found (libvulkan.so.1); install a Vulkan driver, e.g. mesa-vulkan-drivers");
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

VKAPI_ATTR VkBool32 VKAPI_CALL debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                              VkDebugUtilsMessageTypeFlagsEXT,
                                              const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
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

std::uint32_t compute_queue_family(VkPhysicalDevice pd) {
  std::uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> fams(n);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, fams.data());
  // Prefer a compute family without graphics (async compute queues), then any with compute.
  for (std::uint32_t i = 0; i < n; ++i)
    if ((fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(fams[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) return i;
  for (std::uint32_t i = 0; i < n; ++i)
    if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return i;
  return UINT32_MAX;
}

DeviceInfo describe(VkPhysicalDevice pd, std::uint32_t index, std::uint32_t instance_version) {
  VkPhysicalDeviceProperties p{};
  vkGetPhysicalDeviceProperties(pd, &p);
  DeviceInfo d;
  d.index = index;
  d.name = p.deviceName;
  d.type = to_type(p.deviceType);
  d.vendor_id = p.vendorID;
  d.device_id = p.deviceID;
  d.api_version = p.apiVersion;
  d.has_compute = compute_queue_family(pd) != UINT32_MAX;
  if (instance_version >= VK_API_VERSION_1_2 && p.apiVersion >= VK_API_VERSION_1_2) {
    VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &drv};
    vkGetPhysicalDeviceProperties2(pd, &p2);
    d.driver = std::string(drv.driverName) + " " + drv.driverInfo;
  }
  return d;
}

bool has_layer(const char* name) {
  std::uint32_t n = 0;
  vkEnumerateInstanceLayerProperties(&n, nullptr);
  std::vector<VkLayerProperties> layers(n);
  vkEnumerateInstanceLayerProperties(&n, layers.data());
  return std::any_of(layers.begin(), layers.end(), [&](auto& l) { return std::strcmp(l.layerName, name) == 0; });
}

bool has_instance_extension(const char* name) {
  std::uint32_t n = 0;
  vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateInstanceExtensionProperties(nullptr, &n, exts.data());
  return std::any_of(exts.begin(), exts.end(), [&](auto& e) { return std::strcmp(e.extensionName, name) == 0; });
}

// Creates an instance; with `validation`, the Khronos layer with synchronization validation and
// a messenger reporting into `dev`.
VkInstance create_instance(bool validation, Device* dev, VkDebugUtilsMessengerEXT* messenger) {
  load_system_loader();
  std::uint32_t version = volkGetInstanceVersion();
  if (version < VK_API_VERSION_1_1) throw VulkanError("the Vulkan loader supports only Vulkan 1.0; relpos needs 1.1");
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "relpos";
  app.pEngineName = "relpos";
  app.apiVersion = std::min(version, VK_API_VERSION_1_3);

  std::vector<const char*> layers, exts;
  bool portability = has_instance_extension(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
  if (portability) exts.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
  VkValidationFeatureEnableEXT enables[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = enables;
  VkDebugUtilsMessengerCreateInfoEXT dbg{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  dbg.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  dbg.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
  dbg.pfnUserCallback = debug_callback;
  dbg.pUserData = dev;
  if (validation) {
    if (!has_layer(kValidationLayer))
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
  vk_check(vkCreateInstance(&ci, nullptr, &instance), "vkCreateInstance");
  volkLoadInstanceOnly(instance);
  if (validation) {
    VkResult r = vkCreateDebugUtilsMessengerEXT(instance, &dbg, nullptr, messenger);
    if (r != VK_SUCCESS) {
      vkDestroyInstance(instance, nullptr);
      vk_check(r, "vkCreateDebugUtilsMessengerEXT");
    }
  }
  return instance;
}

std::vector<VkPhysicalDevice> physical_devices(VkInstance instance) {
  std::uint32_t n = 0;
  vk_check(vkEnumeratePhysicalDevices(instance, &n, nullptr), "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> pds(n);
  vk_check(vkEnumeratePhysicalDevices(instance, &n, pds.data()), "vkEnumeratePhysicalDevices");
  pds.resize(n);
  return pds;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void read_limits(Device& d) {
  VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &sub};
  VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  sub.pNext = &m3;
  vkGetPhysicalDeviceProperties2(d.physical, &p2);
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
  o.max_memory_allocation_size = m3.maxMemoryAllocationSize;
  o.subgroup_size = sub.subgroupSize;
  o.subgroup_shuffle = (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0 &&
                       (sub.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) != 0;
  o.timestamp_period_ns = l.timestampPeriod;
  std::uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &n, nullptr);
  std::vector<VkQueueFamilyProperties> fams(n);
  vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &n, fams.data());
  o.timestamps = d.queue_family < n && fams[d.queue_family].timestampValidBits > 0 && l.timestampPeriod > 0;
  vkGetPhysicalDeviceMemoryProperties(d.physical, &d.memory);
}

void apply_overrides(Device& d, const ContextOptions& opt) {
  d.staging_only = opt.staging_only;
  d.distance_expansion = opt.distance_expansion;
  if (opt.no_subgroup_shuffles) d.limits.subgroup_shuffle = false;
  if (opt.max_storage_buffer_range)
    d.limits.max_storage_buffer_range = std::min<std::uint64_t>(d.limits.max_storage_buffer_range, opt.max_storage_buffer_range);
  if (opt.max_workgroup_count)
    for (auto& c : d.limits.max_workgroup_count) c = std::min(c, opt.max_workgroup_count);
}

void create_runtime_objects(Device& d) {
  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = d.queue_family;
  vk_check(d.vk.vkCreateCommandPool(d.device, &pci, nullptr, &d.command_pool), "vkCreateCommandPool");
  VkPipelineCacheCreateInfo cci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  vk_check(d.vk.vkCreatePipelineCache(d.device, &cci, nullptr, &d.pipeline_cache), "vkCreatePipelineCache");
}

void set_message_handler(Device& d, const ContextOptions& opt) {
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

Device::~Device() {
  if (device) {
    vk.vkDeviceWaitIdle(device);
    for (auto& [key, p] : pipelines) {
      vk.vkDestroyPipeline(device, p.pipeline, nullptr);
      vk.vkDestroyPipelineLayout(device, p.layout, nullptr);
      vk.vkDestroyDescriptorSetLayout(device, p.set_layout, nullptr);
    }
    if (pipeline_cache) vk.vkDestroyPipelineCache(device, pipeline_cache, nullptr);
    if (command_pool) vk.vkDestroyCommandPool(device, command_pool, nullptr);
    if (owns_device) vk.vkDestroyDevice(device, nullptr);
  }
  if (owns_instance && instance) {
    if (messenger) vkDestroyDebugUtilsMessengerEXT(instance, messenger, nullptr);
    vkDestroyInstance(instance, nullptr);
  }
}

}  // namespace detail

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
  tmp.owns_instance = true;
  tmp.instance = detail::create_instance(false, &tmp, nullptr);
  std::vector<DeviceInfo> out;
  auto pds = detail::physical_devices(tmp.instance);
  for (std::uint32_t i = 0; i < pds.size(); ++i) out.push_back(detail::describe(pds[i], i, volkGetInstanceVersion()));
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
  Device& d = *device_;
  d.validation = opt.validation || detail::env_flag("RELPOS_VALIDATION");
  detail::set_message_handler(d, opt);
  d.owns_instance = true;
  d.instance = detail::create_instance(d.validation, &d, &d.messenger);
  auto pds = detail::physical_devices(d.instance);
  std::vector<DeviceInfo> infos;
  for (std::uint32_t i = 0; i < pds.size(); ++i) infos.push_back(detail::describe(pds[i], i, volkGetInstanceVersion()));
  std::uint32_t idx = pick_device(infos, opt.device);
  d.physical = pds[idx];
  d.info = infos[idx];
  d.queue_family = detail::compute_queue_family(d.physical);

  float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = d.queue_family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  std::vector<const char*> exts;
  {
    std::uint32_t n = 0;
    vkEnumerateDeviceExtensionProperties(d.physical, nullptr, &n, nullptr);
    std::vector<VkExtensionProperties> avail(n);
    vkEnumerateDeviceExtensionProperties(d.physical, nullptr, &n, avail.data());
    for (auto& e : avail)
      if (std::strcmp(e.extensionName, "VK_KHR_portability_subset") == 0) exts.push_back("VK_KHR_portability_subset");
  }
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = static_cast<std::uint32_t>(exts.size());
  dci.ppEnabledExtensionNames = exts.data();
  vk_check(vkCreateDevice(d.physical, &dci, nullptr, &d.device), "vkCreateDevice");
  d.owns_device = true;
  volkLoadDeviceTable(&d.vk, d.device);
  d.vk.vkGetDeviceQueue(d.device, d.queue_family, 0, &d.queue);
  detail::read_limits(d);
  detail::apply_overrides(d, opt);
  detail::create_runtime_objects(d);
}

Context::Context(const AdoptedVulkan& app, const ContextOptions& opt) : device_(std::make_shared<Device>()) {
  if (!app.instance || !app.physical_device || !app.device || !app.queue)
    throw InvalidArgument("AdoptedVulkan: instance, physical_device, device and queue must all be set");
  Device& d = *device_;
  detail::set_message_handler(d, opt);
  if (app.get_instance_proc_addr)
    volkInitializeCustom(app.get_instance_proc_addr);
  else
    detail::load_system_loader();
  // Loads relpos's private instance-level pointers; the application's are separate symbols.
  volkLoadInstanceOnly(app.instance);
  d.instance = app.instance;
  d.physical = app.physical_device;
  d.device = app.device;
  d.queue = app.queue;
  d.queue_family = app.queue_family;
  d.info = detail::describe(d.physical, 0, volkGetInstanceVersion());
  {
    std::uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &n, nullptr);
    std::vector<VkQueueFamilyProperties> fams(n);
    vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &n, fams.data());
    if (app.queue_family >= n || !(fams[app.queue_family].queueFlags & VK_QUEUE_COMPUTE_BIT))
      throw InvalidArgument("AdoptedVulkan: queue_family " + std::to_string(app.queue_family) + " has no compute support");
  }
  if (d.info.api_version < VK_API_VERSION_1_1) throw VulkanError("the adopted device supports only Vulkan 1.0; relpos needs 1.1");
  volkLoadDeviceTable(&d.vk, d.device);
  detail::read_limits(d);
  detail::apply_overrides(d, opt);
  detail::create_runtime_objects(d);
}

Context::~Context() = default;
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;

const DeviceInfo& Context::device_info() const { return device_->info; }
const DeviceLimits& Context::limits() const { return device_->limits; }
DistanceExpansion Context::distance_expansion() const { return device_->distance_expansion; }
bool Context::validation_enabled() const { return device_->validation; }
std::uint64_t Context::validation_message_count() const { return device_->validation_messages.load(); }
VkDevice Context::vk_device() const { return device_->device; }
VkPhysicalDevice Context::vk_physical_device() const { return device_->physical; }
VkQueue Context::vk_queue() const { return device_->queue; }
std::uint32_t Context::queue_family() const { return device_->queue_family; }

void Context::wait_idle() {
  std::lock_guard lock(device_->submit_mutex);
  vk_check(device_->vk.vkQueueWaitIdle(device_->queue), "vkQueueWaitIdle");
}

}  // namespace relpos
