#pragma once
// The library's private view of Vulkan: volk (names renamed, see cmake/VolkPrivate.cmake) and a
// checked-call helper.
#include <volk.h>

#include <string>

#include "relpos/error.hpp"

namespace relpos::detail {

const char* vk_result_name(VkResult r);

inline void vk_check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) throw VulkanError(std::string(what) + " failed: " + vk_result_name(r));
}

}  // namespace relpos::detail
