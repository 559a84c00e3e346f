#include "vk/loader.hpp"

#include <mutex>
#include <string>

namespace relpos::detail {
namespace {

template <class Pfn>
void resolve(PFN_vkGetInstanceProcAddr gipa, VkInstance instance, const char* name, Pfn& out, bool required) {
  out = reinterpret_cast<Pfn>(gipa(instance, name));
  if (!out && required) throw VulkanError(std::string("the Vulkan loader has no ") + name);
}

}  // namespace

void InstanceFunctions::load_global(PFN_vkGetInstanceProcAddr entry) {
  if (!entry) {
    // volkInitialize opens libvulkan.so.1 and writes volk's globals: once, for every context.
    static std::once_flag once;
    static VkResult result = VK_ERROR_INITIALIZATION_FAILED;
    std::call_once(once, [] { result = volkInitialize(); });
    if (result != VK_SUCCESS)
      throw VulkanError("no Vulkan loader found (libvulkan.so.1); install a Vulkan driver, e.g. mesa-vulkan-drivers");
    entry = ::vkGetInstanceProcAddr;  // volk's (renamed) global, never written again after call_once
  }
  vkGetInstanceProcAddr = entry;
  resolve(entry, VK_NULL_HANDLE, "vkEnumerateInstanceVersion", vkEnumerateInstanceVersion, false);
  resolve(entry, VK_NULL_HANDLE, "vkEnumerateInstanceLayerProperties", vkEnumerateInstanceLayerProperties, true);
  resolve(entry, VK_NULL_HANDLE, "vkEnumerateInstanceExtensionProperties", vkEnumerateInstanceExtensionProperties, true);
  resolve(entry, VK_NULL_HANDLE, "vkCreateInstance", vkCreateInstance, true);
}

void InstanceFunctions::load_instance(VkInstance instance) {
  auto gipa = vkGetInstanceProcAddr;
  resolve(gipa, instance, "vkDestroyInstance", vkDestroyInstance, true);
  resolve(gipa, instance, "vkEnumeratePhysicalDevices", vkEnumeratePhysicalDevices, true);
  resolve(gipa, instance, "vkGetPhysicalDeviceProperties", vkGetPhysicalDeviceProperties, true);
  resolve(gipa, instance, "vkGetPhysicalDeviceProperties2", vkGetPhysicalDeviceProperties2, false);
  resolve(gipa, instance, "vkGetPhysicalDeviceFeatures2", vkGetPhysicalDeviceFeatures2, false);
  resolve(gipa, instance, "vkGetPhysicalDeviceQueueFamilyProperties", vkGetPhysicalDeviceQueueFamilyProperties, true);
  resolve(gipa, instance, "vkGetPhysicalDeviceMemoryProperties", vkGetPhysicalDeviceMemoryProperties, true);
  resolve(gipa, instance, "vkEnumerateDeviceExtensionProperties", vkEnumerateDeviceExtensionProperties, true);
  resolve(gipa, instance, "vkCreateDevice", vkCreateDevice, true);
  resolve(gipa, instance, "vkGetDeviceProcAddr", vkGetDeviceProcAddr, true);
  resolve(gipa, instance, "vkCreateDebugUtilsMessengerEXT", vkCreateDebugUtilsMessengerEXT, false);
  resolve(gipa, instance, "vkDestroyDebugUtilsMessengerEXT", vkDestroyDebugUtilsMessengerEXT, false);
}

std::uint32_t InstanceFunctions::loader_version() const {
  std::uint32_t v = VK_API_VERSION_1_0;
  if (vkEnumerateInstanceVersion && vkEnumerateInstanceVersion(&v) != VK_SUCCESS) v = VK_API_VERSION_1_0;
  return v;
}

void load_device_table(const InstanceFunctions& functions, VkDevice device, VolkDeviceTable* table) {
  // volkLoadDeviceTable resolves through volk's global vkGetDeviceProcAddr: set it to this
  // context's, and hold the lock until the table is filled, so no other context's load sees it.
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  ::vkGetDeviceProcAddr = functions.vkGetDeviceProcAddr;
  volkLoadDeviceTable(table, device);
  ::vkGetDeviceProcAddr = nullptr;
}

}  // namespace relpos::detail
