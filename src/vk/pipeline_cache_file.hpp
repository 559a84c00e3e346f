#pragma once
// The persistent pipeline cache (ContextOptions::pipeline_cache_path): one file per driver cache
// identity (the device's pipelineCacheUUID, vendor and device ids) in that directory, read when a
// Context starts and written atomically when it ends, so that a second process start skips the
// driver's shader compiles.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "vk/vulkan.hpp"

namespace relpos::detail {

using Warn = std::function<void(const std::string&)>;

// The cache file for this device in `dir`.
std::filesystem::path pipeline_cache_file(const std::filesystem::path& dir, const VkPhysicalDeviceProperties& props);

// The cache data where the file holds one of this device: relpos's envelope (a magic, the data's
// size and CRC-32) intact, then the header Vulkan defines (size, version, vendor, device, UUID).
// Empty where the file is absent, and empty with a warning where it is unreadable, too large,
// another device's, of another format or corrupt.
std::vector<char> read_pipeline_cache(const std::filesystem::path& file, const VkPhysicalDeviceProperties& props, const Warn& warn);

// Writes `data` in its envelope to `file` through a temporary file in the same directory and a rename, so that a
// reader (another process) sees the old file or the new one, never a part. Creates the directory.
// Never throws: a failure is a warning.
void write_pipeline_cache(const std::filesystem::path& file, const std::vector<char>& data, const Warn& warn);

}  // namespace relpos::detail
