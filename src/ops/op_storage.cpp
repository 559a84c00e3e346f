// A recording's scratch as an op's storage (op_storage.hpp).
#include "ops/op_storage.hpp"

#include <cstring>

#include "vk/dispatch.hpp"

namespace relpos::detail {

const Buffer& RecordingStorage::make(std::uint64_t bytes, const std::string&) { return scratch_at_least(r_, bytes, MemoryUse::Device); }

// Host-visible scratch no GPU work uses yet (fresh, or its last submission has finished).
const Buffer& RecordingStorage::upload_bytes(const void* data, std::uint64_t bytes, const std::string&) {
  Buffer& b = scratch(r_, bytes, MemoryUse::Host);
  if (bytes) std::memcpy(b.host_pointer(), data, bytes);
  return b;
}

}  // namespace relpos::detail
