// check_host_memory (registry.hpp): a run's host arrays against the machine's memory.
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "registry.hpp"

namespace relpos::tool {
namespace {

constexpr std::uint64_t kSaturated = std::numeric_limits<std::uint64_t>::max();

// Flags' products overflow 64 bits (four 32-bit counts): a product that does is "at least 2^64".
std::uint64_t times(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? kSaturated : r;
}

std::uint64_t plus(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? kSaturated : r;
}

std::uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return times(static_cast<std::uint64_t>(pages), static_cast<std::uint64_t>(page));
}

}  // namespace

void check_host_memory(const std::vector<HostArray>& arrays) {
  std::uint64_t bytes = 0;
  for (const HostArray& a : arrays) {
    std::uint64_t n = a.element_bytes;
    for (const auto& [name, d] : a.dims) n = times(n, d);
    bytes = plus(bytes, n);
  }
  const std::uint64_t memory = physical_memory();
  if (memory == 0) return;  // sysconf cannot tell: the allocations' own failures remain
  const std::uint64_t limit = memory / 4;
  if (bytes <= limit) return;
  // Each size once, in the order the arrays name them.
  std::vector<std::pair<std::string, std::uint64_t>> sizes;
  for (const HostArray& a : arrays)
    for (const auto& dim : a.dims)
      if (std::find_if(sizes.begin(), sizes.end(), [&](const auto& s) { return s.first == dim.first; }) == sizes.end()) sizes.push_back(dim);
  std::string text;
  for (const auto& [name, d] : sizes) text += (text.empty() ? "" : ", ") + name + " = " + std::to_string(d);
  throw InvalidArgument("out of host memory: " + text + ": the run's host arrays take " +
                        (bytes == kSaturated ? "at least 2^64" : std::to_string(bytes)) + " bytes, more than the limit of " +
                        std::to_string(limit) + " bytes (a quarter of this machine's " + std::to_string(memory) + " bytes of memory)");
}

}  // namespace relpos::tool
