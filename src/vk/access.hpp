#pragma once
// The runtime's way into the private parts of the public classes. The installed headers name only
// opaque private types (Context::Device, Recorder::State); this header, which is not installed,
// defines them as the runtime's own Device and RecorderState and gives src/ the accessors.
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/recorder.hpp"
#include "vk/device.hpp"
#include "vk/dispatch.hpp"

namespace relpos {

// Every detail::Device is made as a Context's (Context's constructors are the only place one is
// created), so a Device shared by a Context's recorders is always a Context::Device.
struct Context::Device : detail::Device {};
struct Recorder::State : detail::RecorderState {};

struct RuntimeAccess {
  static detail::Device& live_device(const Context& ctx) { return detail::live_state(ctx.device_, "Context"); }
  static std::shared_ptr<detail::Device> device(const Context& ctx) {
    (void)live_device(ctx);
    return ctx.device_;
  }
  // Another Context on `device`: the one a Recorder keeps, so that it outlives the application's.
  static Context context(const std::shared_ptr<detail::Device>& device) { return Context(std::static_pointer_cast<Context::Device>(device)); }
  static detail::RecorderState& state(const Recorder& r) { return detail::live_state(r.state_, "Recorder"); }
  // The Device a buffer was made on (null: an empty Buffer).
  static const detail::Device* device(const Buffer& b) { return b.device_.get(); }

  // A buffer of relpos's own on `device` (scratch buffers, which outlive no Context).
  static Buffer buffer(const std::shared_ptr<detail::Device>& device, std::uint64_t bytes, MemoryUse use) {
    return Buffer(std::static_pointer_cast<Context::Device>(device), bytes, use);
  }
  // Takes the handles of a relpos-made buffer (its memory stays mapped); the Buffer is left empty
  // and frees nothing.
  static detail::BufferHandles take_handles(Buffer& b, MemoryUse use) {
    const detail::BufferHandles handles{b.buffer_, b.memory_, b.mapped_, b.size_, use};
    b.owned_ = false;
    b.mapped_ = nullptr;
    b.release();
    return handles;
  }
  // A relpos-made buffer again from its handles (take_handles), owning them.
  static Buffer adopt(const std::shared_ptr<detail::Device>& device, const detail::BufferHandles& h) {
    Buffer b;
    b.device_ = std::static_pointer_cast<Context::Device>(device);
    b.buffer_ = h.buffer;
    b.memory_ = h.memory;
    b.mapped_ = h.mapped;
    b.size_ = h.size;
    b.capacity_ = (h.size + 15) / 16 * 16;
    b.owned_ = true;
    b.usage_ = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    return b;
  }
};

namespace detail {

// The Device that `ctx` owns, shared with its buffers and recorders.
inline std::shared_ptr<Device> device_of(const Context& ctx) { return RuntimeAccess::device(ctx); }
// What a Recorder records into.
inline RecorderState& state_of(const Recorder& r) { return RuntimeAccess::state(r); }
// The most bytes one Buffer holds on a device: whole 16-byte words (buffers are allocated so)
// within maxMemoryAllocationSize (0, unreported: no bound).
inline std::uint64_t max_buffer_bytes(const DeviceLimits& l) {
  return (l.max_memory_allocation_size ? l.max_memory_allocation_size : ~std::uint64_t{0}) / 16 * 16;
}

// InvalidArgument unless `b` (null: nothing to check) was made on the Context `r` records on: a
// VkBuffer of another device in a descriptor set is undefined behaviour (on lavapipe, a crash).
// `name` is the parameter ("q buffer").
void require_own_buffer(Recorder& r, const Buffer* b, const std::string& name);
// A buffer an op binds (null: none), its parameter's name, and whether the op writes it.
struct BufferRole {
  const Buffer* buffer;
  const char* name;
  bool written = false;
};
// require_own_buffer for each of an op's buffers (null ones skipped), and none that the op writes
// shares a byte with another it binds: the same Buffer twice, or two views of one VkBuffer whose
// ranges overlap (an engine's arena of caches), would have one's writes land in the other's data.
void require_own_buffers(Recorder& r, std::initializer_list<BufferRole> buffers);
// InvalidArgument unless `r` records on the Context whose Device is `dev`: a plan keeps its
// Context's Device (which a moved Context takes along), not the Context's address.
void require_plan_recorder(Recorder& r, const std::shared_ptr<Device>& dev);

}  // namespace detail
}  // namespace relpos
