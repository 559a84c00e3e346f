#pragma once
// What an operation uses to put work into a Recorder: barriers, scratch buffers, dispatches of
// embedded shaders and transfer commands. How work is cut into dispatches and bindings the device
// accepts is the planner's (ops/planner.hpp).
#include <cstdint>
#include <algorithm>
#include <initializer_list>
#include <list>
#include <memory>
#include <string_view>
#include <vector>

#include "relpos/buffer.hpp"
#include "relpos/recorder.hpp"
#include "shader_id.hpp"
#include "vk/device.hpp"

namespace relpos::detail {

struct RecorderState {
  Context* ctx = nullptr;
  std::shared_ptr<Device> dev;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  bool external = false;
  VkCommandPool command_pool = VK_NULL_HANDLE;  // a recorder's own: pools are externally synchronised
  VkFence fence = VK_NULL_HANDLE;
  RecordingResources resources;
  std::vector<MemoryUse> scratch_uses;  // of resources.scratch, in its order
  // A recorder's own command buffer, once its submission has finished: the last recording's
  // scratch buffers wait here for a later one that asks for the same size and use, and its
  // descriptor pools are reset and used again in order (pools_used of them so far).
  std::list<Buffer> spare_scratch;
  std::list<MemoryUse> spare_uses;
  std::size_t pools_used = 0;
  std::uint32_t sets_left = 0;
  bool timestamps_reset = false;
  std::uint32_t next_timestamp = 0;
  std::uint32_t dispatches = 0;
  std::vector<std::uint64_t> timestamp_values;  // of the last finished submission
  // Recorder::submit() without its wait() yet: the Submissions ticket of the work in flight.
  bool in_flight = false;
  std::uint64_t ticket = 0;
  RecorderState() = default;
  RecorderState(const RecorderState&) = delete;
  RecorderState& operator=(const RecorderState&) = delete;
  ~RecorderState();
};

// One operation's recording. It begins with a barrier making earlier compute/transfer writes
// visible to the operation (whose writes also wait for earlier reads of the same memory). In an
// application's command buffer it ends by setting a fresh event: once the last such event is set,
// every command relpos recorded has executed, and a destroyed Recorder's resources can go.
class [[nodiscard]] OpScope {
 public:
  explicit OpScope(Recorder& r);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  Recorder& r_;
};

// A range of a buffer bound to one binding. bytes == 0: to the end of the buffer.
struct BufferSpan {
  const Buffer* buffer = nullptr;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};

// Start of an operation, which lasts while the returned scope lives (see OpScope).
inline OpScope begin_op(Recorder& r) { return OpScope(r); }
// Between two dispatches of one operation where the second reads what the first wrote.
void barrier(Recorder& r);

// A buffer that lives as long as the recording (until submit_and_wait or the Recorder's end).
Buffer& scratch(Recorder& r, std::uint64_t bytes, MemoryUse use);

// Where a dispatch's descriptor set comes from when not from the recording's own pools: a plan's
// sets (ops/attention_plan.cpp), which it hands out for the pipeline's layout, to be written now.
class DescriptorSource {
 public:
  virtual VkDescriptorSet take(const Pipeline& pipeline) = 0;

 protected:
  ~DescriptorSource() = default;
};

// Records one dispatch of an embedded shader (ShaderId: one per shaders/*.comp). spec[0] is the
// workgroup size (constant_id 0); bindings are in binding order; the push block is at most 128
// bytes. The descriptor set comes from `sets`, or from the recording's pools when it is null.
void dispatch(Recorder& r, DescriptorSource* sets, ShaderId shader, const std::vector<std::uint32_t>& spec,
              std::initializer_list<BufferSpan> bindings, const void* push, std::size_t push_bytes, std::uint32_t groups_x,
              std::uint32_t groups_y = 1, std::uint32_t groups_z = 1);
inline void dispatch(Recorder& r, ShaderId shader, const std::vector<std::uint32_t>& spec,
                     std::initializer_list<BufferSpan> bindings, const void* push, std::size_t push_bytes, std::uint32_t groups_x,
                     std::uint32_t groups_y = 1, std::uint32_t groups_z = 1) {
  dispatch(r, nullptr, shader, spec, bindings, push, push_bytes, groups_x, groups_y, groups_z);
}

template <class Push>
void dispatch(Recorder& r, ShaderId shader, const std::vector<std::uint32_t>& spec,
              std::initializer_list<BufferSpan> bindings, const Push& push, std::uint32_t groups_x, std::uint32_t groups_y = 1,
              std::uint32_t groups_z = 1) {
  static_assert(sizeof(Push) <= 128, "push constants are limited to 128 bytes");
  dispatch(r, nullptr, shader, spec, bindings, &push, sizeof(Push), groups_x, groups_y, groups_z);
}
template <class Push>
void dispatch(Recorder& r, DescriptorSource* sets, ShaderId shader, const std::vector<std::uint32_t>& spec,
              std::initializer_list<BufferSpan> bindings, const Push& push, std::uint32_t groups_x, std::uint32_t groups_y = 1,
              std::uint32_t groups_z = 1) {
  static_assert(sizeof(Push) <= 128, "push constants are limited to 128 bytes");
  dispatch(r, sets, shader, spec, bindings, &push, sizeof(Push), groups_x, groups_y, groups_z);
}

// Records transfer copies from `src` to `dst` (vkCmdCopyBuffer): the regions must lie inside both.
void copy_regions(Recorder& r, const Buffer& src, const Buffer& dst, const std::vector<VkBufferCopy>& regions);
// Records vkCmdUpdateBuffer of `words` at `offset` (in pieces of 64 KiB): host data ordered in
// the command buffer, so a submission still pending keeps reading what it was recorded with.
void update_words(Recorder& r, const Buffer& dst, std::uint64_t offset, const std::vector<std::uint32_t>& words);
// Records vkCmdFillBuffer of `bytes` (a multiple of 4) at `offset` with the 32-bit `value`.
void fill_words(Recorder& r, const Buffer& dst, std::uint64_t offset, std::uint64_t bytes, std::uint32_t value);

// The subgroup size where the lanes of a subgroup should share their storage loads by
// subgroupShuffle, 0 where not: the CPU kernel class (on a CPU device each load is a loop over the
// subgroup's lanes; on a GPU a load of one address by every lane is a broadcast already), on a
// device whose subgroups can shuffle in compute shaders and tile a workgroup of `group` invocations.
inline std::uint32_t load_sharing_subgroup(const Context& ctx, std::uint32_t group) {
  const DeviceLimits& lim = ctx.limits();
  const std::uint32_t sub = lim.subgroup_size;
  const bool share = ctx.tuning().kernels == Kernels::Cpu && lim.subgroup_shuffle && sub > 1 && group % sub == 0;
  return share ? sub : 0;
}

}  // namespace relpos::detail
