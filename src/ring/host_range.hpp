#pragma once
// The host bytes of a range of a host-visible Buffer, as the ring transports take them.
#include <cstddef>
#include <cstdint>
#include <string>

#include "relpos/buffer.hpp"
#include "relpos/error.hpp"

namespace relpos::detail {

inline std::byte* host_range(const Buffer& b, std::uint64_t offset, std::uint64_t bytes, const char* what) {
  if (!b.host_pointer())
    throw InvalidArgument(std::string(what) + " buffer: not host-visible: a ring transport reads and writes staging through its mapping "
                          "(make it with MemoryUse::Host)");
  if (offset > b.size() || bytes > b.size() - offset)
    throw InvalidArgument(std::string(what) + " range [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                          "): outside the buffer of " + std::to_string(b.size()) + " bytes");
  return static_cast<std::byte*>(b.host_pointer()) + offset;
}

}  // namespace relpos::detail
