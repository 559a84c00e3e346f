#pragma once
// An application that uses Vulkan itself, through the system loader's exported functions: its own
// instance (with the validation layer and synchronization validation, reporting to the app),
// device, queue, queue lock and command buffers, which it adopts into relpos. Link the system
// loader (tests/CMakeLists.txt) to use it.
#include <gtest/gtest.h>
#include <vulkan/vulkan.h>

#include <relpos/relpos.hpp>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace relpos::test {

class AppVulkan {
 public:
  // `api_version`: the VkApplicationInfo::apiVersion the instance is created with; push_descriptors:
  // the device enables VK_KHR_push_descriptor where it has it (push_descriptors_enabled()).
  explicit AppVulkan(std::uint32_t api_version = VK_API_VERSION_1_1, bool push_descriptors = false) : api_version_(api_version) {
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.apiVersion = api_version;
    VkValidationFeatureEnableEXT enables[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
    VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
    features.enabledValidationFeatureCount = 1;
    features.pEnabledValidationFeatures = enables;
    VkDebugUtilsMessengerCreateInfoEXT dbg{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    dbg.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    dbg.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
    dbg.pfnUserCallback = &AppVulkan::on_message;
    dbg.pUserData = this;
    features.pNext = &dbg;
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ici.pNext = &features;
    ici.pApplicationInfo = &app;
    ici.enabledLayerCount = 1;
    ici.ppEnabledLayerNames = &layer;
    ici.enabledExtensionCount = 1;
    ici.ppEnabledExtensionNames = &ext;
    check(vkCreateInstance(&ici, nullptr, &instance), "vkCreateInstance");
    auto create_messenger =
        reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
    check(create_messenger(instance, &dbg, nullptr, &messenger_), "vkCreateDebugUtilsMessengerEXT");
    std::uint32_t n = 0;
    vkEnumeratePhysicalDevices(instance, &n, nullptr);
    std::vector<VkPhysicalDevice> pds(n);
    vkEnumeratePhysicalDevices(instance, &n, pds.data());
    if (n == 0) throw std::runtime_error("no Vulkan device");
    physical = pds[0];
    std::uint32_t nf = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &nf, nullptr);
    std::vector<VkQueueFamilyProperties> fams(nf);
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &nf, fams.data());
    family_count = nf;
    while (family < nf && !(fams[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++family;
    if (family == nf) throw std::runtime_error("no compute queue");
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qci.queueFamilyIndex = family;
    qci.queueCount = 1;
    qci.pQueuePriorities = &prio;
    VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    const char* push = VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME;
    if (push_descriptors) {
      std::uint32_t ne = 0;
      vkEnumerateDeviceExtensionProperties(physical, nullptr, &ne, nullptr);
      std::vector<VkExtensionProperties> exts(ne);
      vkEnumerateDeviceExtensionProperties(physical, nullptr, &ne, exts.data());
      for (const VkExtensionProperties& e : exts) push_descriptors_ = push_descriptors_ || std::string(e.extensionName) == push;
      if (push_descriptors_) {
        dci.enabledExtensionCount = 1;
        dci.ppEnabledExtensionNames = &push;
      }
    }
    check(vkCreateDevice(physical, &dci, nullptr, &device), "vkCreateDevice");
    vkGetDeviceQueue(device, family, 0, &queue);
    VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pci.queueFamilyIndex = family;
    check(vkCreateCommandPool(device, &pci, nullptr, &pool), "vkCreateCommandPool");
  }

  ~AppVulkan() {
    vkDeviceWaitIdle(device);
    for (VkFence f : fences_) vkDestroyFence(device, f, nullptr);
    for (auto [buffer, memory] : buffers_) {
      vkDestroyBuffer(device, buffer, nullptr);
      vkFreeMemory(device, memory, nullptr);
    }
    vkDestroyCommandPool(device, pool, nullptr);
    vkDestroyDevice(device, nullptr);
    reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"))(
        instance, messenger_, nullptr);
    vkDestroyInstance(instance, nullptr);
  }
  AppVulkan(const AppVulkan&) = delete;
  AppVulkan& operator=(const AppVulkan&) = delete;

  // What relpos adopts; with_lock: the application's queue mutex.
  AdoptedVulkan adopted(bool with_lock = true) {
    AdoptedVulkan a{instance, physical, device, queue, family, vkGetInstanceProcAddr};
    a.api_version = api_version_;
    a.push_descriptors = push_descriptors_;
    if (with_lock) a.queue_mutex = &queue_mutex;
    return a;
  }

  // A primary command buffer in the recording state.
  VkCommandBuffer begin_command_buffer() {
    VkCommandBufferAllocateInfo cai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    cai.commandPool = pool;
    cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cai.commandBufferCount = 1;
    VkCommandBuffer cb = VK_NULL_HANDLE;
    check(vkAllocateCommandBuffers(device, &cai, &cb), "vkAllocateCommandBuffers");
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    check(vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
    return cb;
  }

  bool push_descriptors_enabled() const { return push_descriptors_; }

  // Ends `cb` and submits it under the queue lock, signalling `fence`.
  void submit(VkCommandBuffer cb, VkFence fence) {
    check(vkEndCommandBuffer(cb), "vkEndCommandBuffer");
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    std::lock_guard lock(queue_mutex);
    check(vkQueueSubmit(queue, 1, &si, fence), "vkQueueSubmit");
  }

  // Ends `cb`, submits it under the queue lock and waits for the queue.
  void submit_and_wait(VkCommandBuffer cb) {
    submit(cb, VK_NULL_HANDLE);
    std::lock_guard lock(queue_mutex);
    check(vkQueueWaitIdle(queue), "vkQueueWaitIdle");
  }

  // A host-visible VkBuffer of exactly `bytes`, freed with the app.
  VkBuffer make_buffer(VkDeviceSize bytes, VkBufferUsageFlags usage) {
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.size = bytes;
    bi.usage = usage;
    VkBuffer buf = VK_NULL_HANDLE;
    check(vkCreateBuffer(device, &bi, nullptr, &buf), "vkCreateBuffer");
    VkMemoryRequirements req{};
    vkGetBufferMemoryRequirements(device, buf, &req);
    VkPhysicalDeviceMemoryProperties mp{};
    vkGetPhysicalDeviceMemoryProperties(physical, &mp);
    constexpr auto kHost = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    while (ai.memoryTypeIndex < mp.memoryTypeCount &&
           !((req.memoryTypeBits & (1u << ai.memoryTypeIndex)) && (mp.memoryTypes[ai.memoryTypeIndex].propertyFlags & kHost) == kHost))
      ++ai.memoryTypeIndex;
    VkDeviceMemory mem = VK_NULL_HANDLE;
    check(vkAllocateMemory(device, &ai, nullptr, &mem), "vkAllocateMemory");
    check(vkBindBufferMemory(device, buf, mem, 0), "vkBindBufferMemory");
    buffers_.emplace_back(buf, mem);
    return buf;
  }

  // An unsignalled fence, destroyed with the app.
  VkFence make_fence() {
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence f = VK_NULL_HANDLE;
    check(vkCreateFence(device, &fi, nullptr, &f), "vkCreateFence");
    fences_.push_back(f);
    return f;
  }
  // Waits for `fence` (a submission's) and resets it for the next.
  void wait_and_reset(VkFence fence) {
    check(vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    check(vkResetFences(device, 1, &fence), "vkResetFences");
  }

  // Validation messages for the application's instance since the last call.
  std::vector<std::string> take_messages() {
    std::lock_guard lock(messages_mutex_);
    return std::exchange(messages_, {});
  }

  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  std::uint32_t family = 0;
  std::uint32_t family_count = 0;
  VkCommandPool pool = VK_NULL_HANDLE;
  std::mutex queue_mutex;

 private:
  static void check(VkResult r, const char* what) {
    if (r != VK_SUCCESS) throw std::runtime_error(std::string(what) + " failed: " + std::to_string(r));
  }
  static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT,
                                                   const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
    auto* self = static_cast<AppVulkan*>(user);
    std::lock_guard lock(self->messages_mutex_);
    self->messages_.push_back(std::string(severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error [" : "warning [") +
                              (data->pMessageIdName ? data->pMessageIdName : "") + "] " + (data->pMessage ? data->pMessage : ""));
    return VK_FALSE;
  }

  std::uint32_t api_version_;
  bool push_descriptors_ = false;
  std::vector<VkFence> fences_;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  std::mutex messages_mutex_;
  std::vector<std::string> messages_;
  std::vector<std::pair<VkBuffer, VkDeviceMemory>> buffers_;
};

}  // namespace relpos::test
