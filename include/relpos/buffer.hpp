#pragma once
#include <vulkan/vulkan_core.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "relpos/context.hpp"

namespace relpos {

enum class MemoryUse {
  // Device-local. Mapped directly where that memory is also host-visible (integrated GPUs, CPU
  // devices); otherwise upload/download go through a staging buffer.
  Device,
  // Host-visible and coherent: small inputs the host writes often.
  Host,
};

// A storage buffer. Move-only; owns its memory unless made with Buffer::external().
class Buffer {
 public:
  Buffer() = default;
  Buffer(Context& ctx, std::uint64_t bytes, MemoryUse use = MemoryUse::Device);
  // Wraps an application's buffer (created with STORAGE_BUFFER usage, and TRANSFER_SRC/DST for
  // upload/download). relpos never frees it. `usage`: the flags it was created with, where the
  // application passes them; with TRANSFER_DST relpos may write it with transfer copies (see
  // DistanceExpansion), without it (or unknown, 0) only with shaders. `bytes` must be a multiple
  // of 4 (InvalidArgument otherwise): shaders access buffers in 32-bit words, two f16 values to a
  // word, so an f16 tensor of an odd number of values needs a buffer of one more value.
  // `offset`: the view starts that many bytes into the VkBuffer (a tensor inside an application's
  // larger allocation, one layer's KV cache of many); a multiple of the device's
  // minStorageBufferOffsetAlignment (DeviceLimits::min_storage_buffer_offset_alignment) and of 4.
  static Buffer external(Context& ctx, VkBuffer buffer, std::uint64_t bytes, VkBufferUsageFlags usage = 0, std::uint64_t offset = 0);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  explicit operator bool() const { return size_ != 0; }
  std::uint64_t size() const { return size_; }
  // The VkBuffer's own size: size() rounded up, so shaders may store whole 4- and 16-byte words.
  std::uint64_t capacity() const { return capacity_; }
  VkBuffer handle() const { return buffer_; }
  // Where this buffer starts in handle(): 0, or an external view's offset.
  std::uint64_t offset() const { return offset_; }
  // Transfer commands may write it (every buffer relpos creates; external ones created so).
  bool transfer_writable() const { return (usage_ & VK_BUFFER_USAGE_TRANSFER_DST_BIT) != 0; }
  bool host_mapped() const { return mapped_ != nullptr; }
  // The mapping of a host-visible buffer (nullptr otherwise). Writing through it does not wait for
  // the device: only for buffers no submitted work is using.
  void* host_pointer() const { return mapped_; }

  // Synchronous copies between host memory and the buffer. They wait for relpos's own submissions
  // begun before the call (from any thread), never for the application's work on a shared queue:
  // work the application submitted (a Recorder on its command buffer) it must have waited for.
  // An external buffer is copied by transfers: InvalidArgument where its usage was given without
  // TRANSFER_DST (upload) or TRANSFER_SRC (download).
  void upload(const void* data, std::uint64_t bytes, std::uint64_t offset = 0);
  void download(void* data, std::uint64_t bytes, std::uint64_t offset = 0) const;

  template <class T>
  void upload(std::span<const T> values, std::uint64_t offset = 0) {
    upload(values.data(), values.size_bytes(), offset);
  }
  template <class T>
  std::vector<T> download(std::size_t count, std::uint64_t offset = 0) const {
    std::vector<T> out(count);
    download(out.data(), count * sizeof(T), offset);
    return out;
  }

 private:
  friend struct RuntimeAccess;  // the runtime's scratch buffers (not installed)
  Buffer(std::shared_ptr<Context::Device> device, std::uint64_t bytes, MemoryUse use);
  void release() noexcept;

  std::shared_ptr<Context::Device> device_;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  void* mapped_ = nullptr;
  std::uint64_t size_ = 0;
  std::uint64_t capacity_ = 0;
  std::uint64_t offset_ = 0;
  bool owned_ = false;
  VkBufferUsageFlags usage_ = 0;
  std::unique_ptr<std::byte[]> host_only_;  // a compile-only context's stand-in for device memory
};

// Makes a buffer holding `values`.
template <class T>
Buffer make_buffer(Context& ctx, std::span<const T> values, MemoryUse use = MemoryUse::Device) {
  Buffer b(ctx, values.size_bytes() == 0 ? 4 : values.size_bytes(), use);
  if (!values.empty()) b.upload(values);
  return b;
}
template <class T>
Buffer make_buffer(Context& ctx, const std::vector<T>& values, MemoryUse use = MemoryUse::Device) {
  return make_buffer(ctx, std::span<const T>(values), use);
}

}  // namespace relpos
