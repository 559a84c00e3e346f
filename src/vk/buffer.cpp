#include "relpos/buffer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "params/checks.hpp"
#include "relpos/context.hpp"
#include "vk/access.hpp"
#include "vk/device.hpp"

namespace relpos {
namespace detail {

std::uint32_t Device::memory_type(std::uint32_t type_bits, bool host_visible) const {
  constexpr auto kLocal = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  constexpr auto kHost = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  constexpr auto kCached = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
  // Ordered wishes: for device data on a discrete GPU keep the small host-visible heap free; on
  // devices whose local memory is host-visible anyway (integrated, CPU), map it directly. Host
  // buffers of a discrete GPU (staging, ring transfers, MemoryUse::Host) live in cached system
  // memory: its device-local host-visible memory (resizable BAR) is uncached for the CPU, whose
  // reads of it crawl (46 MB/s measured on an H200, which made every download and ring transfer
  // wait on them).
  std::vector<std::pair<VkMemoryPropertyFlags, VkMemoryPropertyFlags>> wishes;  // {required, avoided}
  if (host_visible && info.type == DeviceType::Discrete) {
    wishes = {{kHost | kCached, kLocal}, {kHost | kCached, 0}, {kHost, kLocal}, {kHost, 0}};
  } else if (host_visible) {
    wishes = {{kHost | kLocal, 0}, {kHost, 0}};
  } else if (info.type == DeviceType::Discrete) {
    wishes = {{kLocal, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT}, {kLocal, 0}, {0, 0}};
  } else {
    wishes = {{kLocal | kHost, 0}, {kLocal, 0}, {0, 0}};
  }
  for (auto [required, avoided] : wishes)
    for (std::uint32_t i = 0; i < memory.memoryTypeCount; ++i) {
      auto flags = memory.memoryTypes[i].propertyFlags;
      if ((type_bits & (1u << i)) && (flags & required) == required && !(flags & avoided)) return i;
    }
  throw VulkanError(host_visible ? "no host-visible coherent memory type for a buffer" : "no memory type for a buffer");
}

void Device::run_once(const std::function<void(VkCommandBuffer)>& record) {
  // A pool of its own: command pools are externally synchronised, and any thread may upload.
  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
  pci.queueFamilyIndex = queue_family;
  VkCommandPool pool = VK_NULL_HANDLE;
  vk_check(vk.vkCreateCommandPool(device, &pci, nullptr, &pool), "vkCreateCommandPool");
  VkFence fence = VK_NULL_HANDLE;
  struct Cleanup {
    Device& d;
    VkCommandPool& pool;
    VkFence& fence;
    ~Cleanup() {
      if (fence) d.vk.vkDestroyFence(d.device, fence, nullptr);
      d.vk.vkDestroyCommandPool(d.device, pool, nullptr);
    }
  } cleanup{*this, pool, fence};
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = pool;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  vk_check(vk.vkAllocateCommandBuffers(device, &ai, &cb), "vkAllocateCommandBuffers");
  ++counters.command_buffers;  // with its pool and fence
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  vk_check(vk.vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
  record(cb);
  vk_check(vk.vkEndCommandBuffer(cb), "vkEndCommandBuffer");
  VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  vk_check(vk.vkCreateFence(device, &fi, nullptr, &fence), "vkCreateFence");
  submit_and_wait(cb, fence);
}

void Device::submit_and_wait(VkCommandBuffer cb, VkFence fence) {
  const std::uint64_t ticket = submit(cb, fence);
  wait(fence, ticket);
}

std::uint64_t Device::submit(VkCommandBuffer cb, VkFence fence) {
  const std::uint64_t ticket = submissions.begin();
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  try {
    auto lock = lock_queue();
    vk_check(vk.vkQueueSubmit(queue, 1, &si, fence), "vkQueueSubmit");
  } catch (...) {
    submissions.end(ticket);
    throw;
  }
  return ticket;
}

void Device::wait(VkFence fence, std::uint64_t ticket) {
  struct End {
    Submissions& s;
    std::uint64_t ticket;
    ~End() { s.end(ticket); }
  } end{submissions, ticket};
  vk_check(vk.vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
}

}  // namespace detail

namespace {

constexpr std::uint64_t kStagingChunk = 64ull << 20;

void full_barrier(const VolkDeviceTable& vk, VkCommandBuffer cb, VkPipelineStageFlags src, VkAccessFlags src_access,
                  VkPipelineStageFlags dst, VkAccessFlags dst_access) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = src_access;
  mb.dstAccessMask = dst_access;
  vk.vkCmdPipelineBarrier(cb, src, dst, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

void check_range(const Buffer& b, std::uint64_t bytes, std::uint64_t offset, const char* what) {
  if (offset > b.size() || bytes > b.size() - offset)
    throw InvalidArgument(std::string(what) + ": range [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                          ") is outside the buffer of " + std::to_string(b.size()) + " bytes");
}

// upload() and download() copy into and out of an unmapped buffer by transfers, which Vulkan
// leaves undefined on a buffer created without the usage (validation reports it; a GPU may do
// anything). relpos's own buffers have both; an external one is refused where the application gave
// its usage without the flag. Usage 0 (not given) is the application's to answer for.
void require_transfer_usage(VkBufferUsageFlags usage, VkBufferUsageFlags flag, const char* what, const char* flag_name) {
  if (usage == 0 || (usage & flag) != 0) return;
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%x", static_cast<unsigned>(usage));
  throw InvalidArgument(std::string(what) + ": the external buffer's usage = " + hex + ": must include " + flag_name +
                        " (the copy is a transfer command; create the VkBuffer with it, or write and read it with shaders)");
}

}  // namespace

Buffer::Buffer(Context& ctx, std::uint64_t bytes, MemoryUse use) : Buffer(ctx.device_, bytes, use) {}

Buffer::Buffer(std::shared_ptr<Context::Device> device, std::uint64_t bytes, MemoryUse use)
    : device_(std::move(device)), owned_(true) {
  auto& d = detail::live_state(device_, "Context");  // (a moved-from Context has none)
  // Any other value would be taken as Device.
  detail::require_one_of(use, {MemoryUse::Device, MemoryUse::Host}, "use", "must be Device or Host");
  if (bytes == 0) throw InvalidArgument("buffer size must be > 0");
  size_ = bytes;
  capacity_ = (bytes + 15) / 16 * 16;
  if (capacity_ < bytes) throw InvalidArgument("buffer size " + std::to_string(bytes) + " overflows");
  if (bytes > detail::max_buffer_bytes(d.limits))
    throw InvalidArgument("buffer of " + std::to_string(bytes) + " bytes exceeds the device's maxMemoryAllocationSize of " +
                          std::to_string(d.limits.max_memory_allocation_size) + " bytes");
  if (d.tuning.compile_only) {  // host memory stands in: ops read and write nothing on the device
    usage_ = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    host_only_ = std::make_unique<std::byte[]>(capacity_);
    mapped_ = host_only_.get();
    return;
  }
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = capacity_;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  usage_ = bi.usage;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  detail::vk_check(d.vk.vkCreateBuffer(d.device, &bi, nullptr, &buffer_), "vkCreateBuffer");
  ++d.counters.buffers;
  try {
    VkMemoryRequirements req{};
    d.vk.vkGetBufferMemoryRequirements(d.device, buffer_, &req);
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = d.memory_type(req.memoryTypeBits, use == MemoryUse::Host);
    detail::vk_check(d.vk.vkAllocateMemory(d.device, &ai, nullptr, &memory_), "vkAllocateMemory");
    ++d.counters.memory_allocations;
    detail::vk_check(d.vk.vkBindBufferMemory(d.device, buffer_, memory_, 0), "vkBindBufferMemory");
    constexpr auto kHost = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    const bool may_map = use == MemoryUse::Host || !d.staging_only;
    if (may_map && (d.memory.memoryTypes[ai.memoryTypeIndex].propertyFlags & kHost) == kHost)
      detail::vk_check(d.vk.vkMapMemory(d.device, memory_, 0, VK_WHOLE_SIZE, 0, &mapped_), "vkMapMemory");
  } catch (...) {
    release();
    throw;
  }
}

Buffer Buffer::external(Context& ctx, VkBuffer buffer, std::uint64_t bytes, VkBufferUsageFlags usage, std::uint64_t offset) {
  if (!buffer || bytes == 0) throw InvalidArgument("Buffer::external: a VkBuffer and a size > 0 are required");
  // Shaders read and write storage buffers in 32-bit words (two f16 values to a word): a word that
  // runs past the end of the application's buffer would be dropped, and with it an odd f16
  // tensor's last value. relpos's own buffers are padded; an external one must end on a word.
  if (bytes % 4 != 0)
    throw InvalidArgument("Buffer::external: bytes = " + std::to_string(bytes) +
                          ": must be a multiple of 4 (shaders access buffers in 32-bit words; an f16 tensor of an odd number of "
                          "values needs its buffer rounded up to " + std::to_string((bytes + 3) / 4 * 4) + " bytes)");
  const std::uint64_t align = std::max<std::uint64_t>(ctx.limits().min_storage_buffer_offset_alignment, 4);
  if (offset % align != 0)
    throw InvalidArgument("Buffer::external: offset = " + std::to_string(offset) + ": must be a multiple of minStorageBufferOffsetAlignment = " +
                          std::to_string(align) + " (relpos binds the view from there)");
  // The view lies within the VkBuffer: its memory requirements' size is at least the size it was
  // created with (and no more than alignment padding past it), so a view ending beyond that is
  // past the buffer's end, where relpos's copies and shaders would write into other memory.
  VkMemoryRequirements req{};
  ctx.device_->vk.vkGetBufferMemoryRequirements(ctx.device_->device, buffer, &req);
  if (offset > req.size || bytes > req.size - offset)
    throw InvalidArgument("Buffer::external: offset + bytes = " + std::to_string(offset) + " + " + std::to_string(bytes) +
                          ": must be within the VkBuffer (" + std::to_string(req.size) + " bytes by its memory requirements)");
  Buffer b;
  b.device_ = ctx.device_;
  b.buffer_ = buffer;
  b.size_ = b.capacity_ = bytes;
  b.offset_ = offset;
  b.owned_ = false;
  b.usage_ = usage;
  return b;
}

void Buffer::release() noexcept {
  if (device_ && owned_) {
    auto& d = *device_;
    if (mapped_ && memory_) d.vk.vkUnmapMemory(d.device, memory_);
    if (buffer_) d.vk.vkDestroyBuffer(d.device, buffer_, nullptr);
    if (memory_) d.vk.vkFreeMemory(d.device, memory_, nullptr);
  }
  device_.reset();
  buffer_ = VK_NULL_HANDLE;
  memory_ = VK_NULL_HANDLE;
  mapped_ = nullptr;
  host_only_.reset();
  size_ = capacity_ = offset_ = 0;
  owned_ = false;
  usage_ = 0;
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& o) noexcept { *this = std::move(o); }

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    device_ = std::move(o.device_);
    buffer_ = std::exchange(o.buffer_, VK_NULL_HANDLE);
    memory_ = std::exchange(o.memory_, VK_NULL_HANDLE);
    mapped_ = std::exchange(o.mapped_, nullptr);
    host_only_ = std::move(o.host_only_);
    size_ = std::exchange(o.size_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
    offset_ = std::exchange(o.offset_, 0);
    owned_ = std::exchange(o.owned_, false);
    usage_ = std::exchange(o.usage_, 0);
  }
  return *this;
}

void Buffer::upload(const void* data, std::uint64_t bytes, std::uint64_t offset) {
  check_range(*this, bytes, offset, "Buffer::upload");
  if (bytes == 0) return;  // no copy: no usage needed
  if (!mapped_) require_transfer_usage(usage_, VK_BUFFER_USAGE_TRANSFER_DST_BIT, "Buffer::upload", "VK_BUFFER_USAGE_TRANSFER_DST_BIT");
  auto& d = *device_;
  if (mapped_) {
    // relpos's own work submitted earlier (by any thread) finishes before the host writes; the
    // application's work on a shared queue is its own to wait for (buffer.hpp).
    d.submissions.wait_for_earlier();
    std::memcpy(static_cast<char*>(mapped_) + offset, data, bytes);
    return;
  }
  Buffer staging(device_, std::min(kStagingChunk, bytes), MemoryUse::Host);
  for (std::uint64_t done = 0; done < bytes; done += kStagingChunk) {
    std::uint64_t n = std::min(kStagingChunk, bytes - done);
    std::memcpy(staging.mapped_, static_cast<const char*>(data) + done, n);
    d.run_once([&](VkCommandBuffer cb) {
      full_barrier(d.vk, cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_MEMORY_WRITE_BIT | VK_ACCESS_MEMORY_READ_BIT,
                   VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
      VkBufferCopy region{0, offset_ + offset + done, n};
      d.vk.vkCmdCopyBuffer(cb, staging.buffer_, buffer_, 1, &region);
      full_barrier(d.vk, cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                   VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT);
    });
  }
}

void Buffer::download(void* data, std::uint64_t bytes, std::uint64_t offset) const {
  check_range(*this, bytes, offset, "Buffer::download");
  if (bytes == 0) return;
  if (!mapped_) require_transfer_usage(usage_, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, "Buffer::download", "VK_BUFFER_USAGE_TRANSFER_SRC_BIT");
  auto& d = *device_;
  if (mapped_) {
    d.submissions.wait_for_earlier();
    std::memcpy(data, static_cast<const char*>(mapped_) + offset, bytes);
    return;
  }
  Buffer staging(device_, std::min(kStagingChunk, bytes), MemoryUse::Host);
  for (std::uint64_t done = 0; done < bytes; done += kStagingChunk) {
    std::uint64_t n = std::min(kStagingChunk, bytes - done);
    d.run_once([&](VkCommandBuffer cb) {
      full_barrier(d.vk, cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_MEMORY_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                   VK_ACCESS_TRANSFER_READ_BIT);
      VkBufferCopy region{offset_ + offset + done, 0, n};
      d.vk.vkCmdCopyBuffer(cb, buffer_, staging.buffer_, 1, &region);
      full_barrier(d.vk, cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                   VK_ACCESS_HOST_READ_BIT);
    });
    std::memcpy(static_cast<char*>(data) + done, staging.mapped_, n);
  }
}

}  // namespace relpos
