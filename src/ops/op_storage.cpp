// A recording's scratch as an op's storage (op_storage.hpp).
#include "ops/op_storage.hpp"

#include <cstring>

#include "vk/dispatch.hpp"

namespace relpos::detail {

const Buffer& RecordingStorage::make(std::uint64_t bytes, const std::string&) { return scratch(r_, bytes, MemoryUse::Device); }

const Buffer& RecordingStorage::upload(std::span<const std::uint32_t> words, const std::string&) {
  Buffer& b = scratch(r_, words.size_bytes(), MemoryUse::Host);
  if (!words.empty()) std::memcpy(b.host_pointer(), words.data(), words.size_bytes());
  return b;
}

}  // namespace relpos::detail
