#pragma once
// Where relpos's Vulkan function pointers come from. volk's global pointers would be shared by
// every Context, so two contexts created at once (or one adopting an application's loader entry)
// would race on them or overwrite each other's. Instead each Context resolves the instance-level
// functions it uses into its own `InstanceFunctions`, through its own vkGetInstanceProcAddr, and
// its device functions into its own VolkDeviceTable. volk's globals are only written once (the
// system loader) or under one global mutex (see load_device_table).
#include "vk/vulkan.hpp"

namespace relpos::detail {

struct InstanceFunctions {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  // Global functions (no instance yet).
  PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion = nullptr;  // null: a Vulkan 1.0 loader
  PFN_vkEnumerateInstanceLayerProperties vkEnumerateInstanceLayerProperties = nullptr;
  PFN_vkEnumerateInstanceExtensionProperties vkEnumerateInstanceExtensionProperties = nullptr;
  PFN_vkCreateInstance vkCreateInstance = nullptr;
  // Functions of one instance.
  PFN_vkDestroyInstance vkDestroyInstance = nullptr;
  PFN_vkEnumeratePhysicalDevices vkEnumeratePhysicalDevices = nullptr;
  PFN_vkGetPhysicalDeviceProperties vkGetPhysicalDeviceProperties = nullptr;
  PFN_vkGetPhysicalDeviceProperties2 vkGetPhysicalDeviceProperties2 = nullptr;
  PFN_vkGetPhysicalDeviceFeatures2 vkGetPhysicalDeviceFeatures2 = nullptr;
  PFN_vkGetPhysicalDeviceQueueFamilyProperties vkGetPhysicalDeviceQueueFamilyProperties = nullptr;
  PFN_vkGetPhysicalDeviceMemoryProperties vkGetPhysicalDeviceMemoryProperties = nullptr;
  PFN_vkEnumerateDeviceExtensionProperties vkEnumerateDeviceExtensionProperties = nullptr;
  PFN_vkCreateDevice vkCreateDevice = nullptr;
  PFN_vkGetDeviceProcAddr vkGetDeviceProcAddr = nullptr;
  PFN_vkCreateDebugUtilsMessengerEXT vkCreateDebugUtilsMessengerEXT = nullptr;  // with VK_EXT_debug_utils only
  PFN_vkDestroyDebugUtilsMessengerEXT vkDestroyDebugUtilsMessengerEXT = nullptr;

  // The global functions of `entry`; null `entry`: the system loader (libvulkan.so.1), opened once.
  void load_global(PFN_vkGetInstanceProcAddr entry);
  // The functions of `instance` (after load_global). Throws when one relpos needs is missing.
  void load_instance(VkInstance instance);
  // The loader's instance version (1.0 when it predates vkEnumerateInstanceVersion).
  std::uint32_t loader_version() const;
};

// Loads `table` with the functions of `device`, through `functions.vkGetDeviceProcAddr`.
void load_device_table(const InstanceFunctions& functions, VkDevice device, VolkDeviceTable* table);

}  // namespace relpos::detail
