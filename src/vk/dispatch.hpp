#pragma once
// What an operation uses to put work into a Recorder: barriers, scratch buffers, dispatches of
// embedded shaders and transfer commands. How work is cut into dispatches and bindings the device
// accepts is the planner's (ops/planner.hpp).
#include <cstdint>
#include <algorithm>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "relpos/buffer.hpp"
#include "relpos/recorder.hpp"
#include "shader_id.hpp"
#include "vk/device.hpp"

namespace relpos::detail {

struct RecorderState {
  // Recorder::context(): a Context of the recorder's own on dev, not the address of the one it was
  // made on, which the application may move or destroy while the recorder lives (dev outlives it).
  std::optional<Context> ctx;
  std::shared_ptr<Device> dev;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  bool external = false;
  VkCommandPool command_pool = VK_NULL_HANDLE;  // a recorder's own: pools are externally synchronised
  VkFence fence = VK_NULL_HANDLE;
  RecordingResources resources;
  // Scratch buffers and events from a finished recording (this recorder's own, or one into an
  // application's command buffer that it took from the Device's spares): a request of the same
  // size and memory use takes a buffer, an operation's end takes an event; the descriptor sets of
  // the finished recording are in resources.sets, handed out again.
  std::list<Buffer> spare_scratch;
  std::list<MemoryUse> spare_uses;
  // retain_spare_scratch(): spares a recording did not use stay (up to kRetainedSpares, the least
  // recently used going first) rather than going at its end.
  bool retain_spares = false;
  std::vector<VkEvent> spare_events;
  bool timestamps_reset = false;
  std::uint32_t next_timestamp = 0;
  std::uint32_t dispatches = 0;
  std::vector<std::uint64_t> timestamp_values;  // of the last finished submission
  // Recorder::time_dispatches: each timed dispatch's shader and its two timestamps, of the
  // recording under way and (an own command buffer's) of the last finished submission.
  struct TimedDispatch {
    ShaderId shader;
    std::uint32_t before, after;
  };
  bool time_dispatches = false;
  std::vector<TimedDispatch> timed, timed_finished;
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

// Start of an operation, which lasts while the returned scope lives (see OpScope).
inline OpScope begin_op(Recorder& r) { return OpScope(r); }
// Between two dispatches of one operation where the second reads what the first wrote.
void barrier(Recorder& r);

// A buffer that lives as long as the recording (until submit_and_wait or the Recorder's end).
Buffer& scratch(Recorder& r, std::uint64_t bytes, MemoryUse use);
// The same, of at least `bytes`: the smallest spare that holds them, so that a call smaller than
// the one before (a batch that shrank) takes that one's buffer instead of a new one.
Buffer& scratch_at_least(Recorder& r, std::uint64_t bytes, MemoryUse use);

// Where a dispatch's descriptor set comes from when not from the recording's own pools: a plan's
// sets (ops/attention_plan.cpp), which it hands out for the pipeline's layout. A set taken earlier
// in the same step with the same buffers comes back `written` (it must not be written again: it is
// bound in the command buffer being recorded); any other is to be written now.
struct TakenSet {
  VkDescriptorSet set = VK_NULL_HANDLE;
  bool written = false;
};
class DescriptorSource {
 public:
  virtual TakenSet take(const Pipeline& pipeline, std::span<const VkDescriptorBufferInfo> buffers) = 0;

 protected:
  ~DescriptorSource() = default;
};

// Records one dispatch of an embedded shader (ShaderId: one per shaders/*.comp) with its
// specialisation constants and bindings filled by name in the structs of its contract
// (relpos_contract/, e.g. contract::AttentionTiledSpec and contract::AttentionBindings; a struct of
// another contract, or a binding left empty, is an internal error). The push block is at most 128
// bytes. The descriptor set comes from `sets`, or from the recording's pools when it is null.
void dispatch(Recorder& r, DescriptorSource* sets, ShaderId shader, const SpecValues& spec, const BindingSpans& bindings, const void* push,
              std::size_t push_bytes, std::uint32_t groups_x, std::uint32_t groups_y = 1, std::uint32_t groups_z = 1);

template <class Push>
void dispatch(Recorder& r, ShaderId shader, const SpecValues& spec, const BindingSpans& bindings, const Push& push, std::uint32_t groups_x,
              std::uint32_t groups_y = 1, std::uint32_t groups_z = 1) {
  static_assert(sizeof(Push) <= 128, "push constants are limited to 128 bytes");
  dispatch(r, nullptr, shader, spec, bindings, &push, sizeof(Push), groups_x, groups_y, groups_z);
}
template <class Push>
void dispatch(Recorder& r, DescriptorSource* sets, ShaderId shader, const SpecValues& spec, const BindingSpans& bindings, const Push& push,
              std::uint32_t groups_x, std::uint32_t groups_y = 1, std::uint32_t groups_z = 1) {
  static_assert(sizeof(Push) <= 128, "push constants are limited to 128 bytes");
  dispatch(r, sets, shader, spec, bindings, &push, sizeof(Push), groups_x, groups_y, groups_z);
}

// A recorder whose recordings take turns with different shapes (ring attention's steps: a causal
// ring's diagonal, full and skipped blocks) keeps the scratch of each: by default the scratch
// the recording before used and this one did not goes, so turns of two shapes created buffers at
// every recording.
void retain_spare_scratch(Recorder& r);

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
