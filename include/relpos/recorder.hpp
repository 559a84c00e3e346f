#pragma once
// Where operations are recorded: a command buffer of relpos's own (record, then submit_and_wait),
// or an application's command buffer (record; the application submits).
#include <vulkan/vulkan_core.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace relpos {

class Context;

// One dispatch's GPU time (Recorder::dispatch_times): the embedded shader it ran and the
// milliseconds from when every command before it had finished to when it had.
struct DispatchTime {
  std::string shader;
  double ms = 0;
};

// Threads: a Recorder belongs to one thread at a time (it may move between threads); any number
// of Recorders of one Context may record and submit at once, each from its own thread.
class Recorder {
 public:
  // Records into a command buffer relpos owns (from a command pool of its own). Use
  // submit_and_wait() to run it.
  explicit Recorder(Context& ctx);
  // Records into `external`, which must be in the recording state; the application submits it
  // (on the adopted queue or another queue of the same family), at most once after the Recorder is
  // destroyed. Each operation starts with the barrier that makes earlier compute and transfer
  // writes visible to it; call release() before the application's own commands read the results.
  // The descriptor sets and scratch buffers the commands use outlive the Recorder: each operation
  // ends by setting an event in the command buffer, and when a Recorder is destroyed its resources
  // pass to the Context, which frees them once the last event is set (checked when Recorders are
  // made or submit, and in Context::wait_idle), or when the Context is destroyed. A command buffer
  // that is never submitted is fine; one that is reset or freed after being submitted must have
  // finished executing first (as Vulkan requires anyway).
  Recorder(Context& ctx, VkCommandBuffer external);
  ~Recorder();
  Recorder(Recorder&&) noexcept;
  Recorder& operator=(Recorder&&) noexcept;
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // A Context on the device of the one the Recorder was made on, the Recorder's own: it stays valid
  // when that one is moved or destroyed.
  Context& context() const;
  VkCommandBuffer command_buffer() const;

  // Ends, submits and waits for the recorded work; then the recorder is empty and ready to record
  // again (timestamps of the finished work stay readable until the next recording writes one).
  // Reuse does not grow: the command buffer, the descriptor pools and the scratch buffers of the
  // finished recording are kept for the next one (a scratch buffer is taken again by a request of
  // the same size and memory use; fused attention's by any request it holds, the smallest first),
  // and those the next recording leaves unused are freed at its own submit_and_wait. A loop that
  // records the same shapes every step creates no Vulkan object after its first step, nor does
  // attention() with a batch smaller than the step before; shapes that change every step (keys
  // growing in a decode loop) take a plan (relpos/attention_plan.hpp), which holds its own scratch
  // and descriptor sets.
  // A Recorder on an application's command buffer keeps what its operations used until it is
  // destroyed (see above): make one per command buffer.
  void submit_and_wait();
  // The two halves of submit_and_wait(), for a host that works while the device runs (a ring
  // attention rank moves the next key/value chunk meanwhile): submit() ends and submits the
  // recording and returns at once; wait() waits for it and readies the recorder as
  // submit_and_wait() does (nothing when nothing is in flight). Until wait(), the recorder records
  // nothing (InvalidArgument), and Buffer::upload/download of mapped buffers, from any thread,
  // wait for this work too. A Recorder destroyed in flight waits first.
  void submit();
  void wait();
  bool in_flight() const;

  // Makes every write recorded so far available to later commands of the given stages and
  // accesses (for commands the application records after relpos's).
  void release(VkPipelineStageFlags dst_stages = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
               VkAccessFlags dst_access = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT);

  // GPU timestamps. write_timestamp() returns an index; elapsed_ms() reads two of them after the
  // work has finished (on an application's command buffer, once the application has seen its
  // submission finish: it does not wait). Throws when the queue has no timestamp support.
  std::uint32_t write_timestamp();
  double elapsed_ms(std::uint32_t from, std::uint32_t to) const;

  // Dispatches recorded since the recording began (or since the last submit_and_wait).
  std::uint32_t dispatch_count() const;

  // Profiling: while on, every dispatch relpos records lies between two timestamps (each written
  // once all commands before it have finished), two of write_timestamp()'s 1024 a recording.
  // dispatch_times() gives each timed dispatch's shader and milliseconds in recording order: of the
  // last finished submit_and_wait() on an own command buffer; on an application's, of the
  // recording so far, once the application's submission has finished. Times include a
  // dispatch's launch and its wait for the barrier before it, not the work of transfer commands.
  // Throws where the queue has no timestamp support.
  void time_dispatches(bool on);
  std::vector<DispatchTime> dispatch_times() const;

 private:
  friend struct RuntimeAccess;  // the runtime's way in (not installed)
  struct State;                 // the command buffer, its pools and what its commands use
  std::unique_ptr<State> state_;
};

}  // namespace relpos
