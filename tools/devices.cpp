#include <cstdio>

#include "registry.hpp"

namespace relpos::tool {

int devices_command(const std::string& selector) {
  const auto devices = Context::devices();
  if (devices.empty()) {
    std::printf("no Vulkan devices found\n");
    return 1;
  }
  std::uint32_t chosen = UINT32_MAX;
  std::string why;
  try {
    chosen = Context::pick_device(devices, selector);
  } catch (const std::exception& e) {
    why = e.what();
  }
  for (const auto& d : devices)
    std::printf("%s %u: %s (%s, Vulkan %u.%u.%u%s%s)\n", d.index == chosen ? "*" : " ", d.index, d.name.c_str(),
                std::string(device_type_name(d.type)).c_str(), VK_API_VERSION_MAJOR(d.api_version),
                VK_API_VERSION_MINOR(d.api_version), VK_API_VERSION_PATCH(d.api_version), d.driver.empty() ? "" : ", ",
                d.driver.c_str());
  if (!why.empty()) std::printf("no device would be used: %s\n", why.c_str());
  return chosen == UINT32_MAX ? 1 : 0;
}

}  // namespace relpos::tool
