#pragma once
// Everything a Context owns. Buffers and recorders hold a shared_ptr to it, so the device outlives
// them whatever order the application destroys things in.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "shader_id.hpp"
#include "shaders/contracts.hpp"
#include "vk/loader.hpp"

namespace relpos::detail {

struct Pipeline {
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  std::uint32_t binding_count = 0;
};

// A pipeline is one shader with one set of specialization constants; looked up by a view
// (PipelineKeyView), so that a dispatch allocates nothing.
struct PipelineKey {
  ShaderId shader;
  std::vector<std::uint32_t> spec;
};
struct PipelineKeyView {
  ShaderId shader;
  std::span<const std::uint32_t> spec;
};
struct PipelineKeyLess {
  using is_transparent = void;
  template <class A, class B>
  bool operator()(const A& a, const B& b) const {
    if (a.shader != b.shader) return a.shader < b.shader;
    return std::lexicographical_compare(a.spec.begin(), a.spec.end(), b.spec.begin(), b.spec.end());
  }
};

// The descriptor sets a recording took, by layout, and the pools they came from: once the
// recording has executed they are handed out again in order (`taken` counts this recording's),
// so that recording the same work again allocates no set.
struct SetCache {
  std::vector<VkDescriptorPool> pools;
  std::uint32_t sets_left = 0;  // in pools.back()
  std::map<VkDescriptorSetLayout, std::vector<VkDescriptorSet>> sets;
  std::map<VkDescriptorSetLayout, std::size_t> taken;
};

// A relpos-made buffer as plain handles, with what a later recording needs to take it again.
struct BufferHandles {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  void* mapped = nullptr;
  std::uint64_t size = 0;
  MemoryUse use = MemoryUse::Device;
};

// What a recording's commands use, besides the command buffer.
struct RecordingResources {
  SetCache sets;
  std::list<Buffer> scratch;  // std::list: references stay valid as it grows
  std::vector<MemoryUse> scratch_uses;  // of scratch, in its order (Device where missing)
  VkQueryPool query_pool = VK_NULL_HANDLE;
  // Events the command buffer sets after relpos's commands (see OpScope in dispatch.hpp); the
  // last one set means that every earlier command has executed.
  std::vector<VkEvent> events;
  bool commands_after_last_event = false;
};

// The same, once its Recorder is gone, as plain handles (scratch buffers hold the Device; as
// Buffers they would keep it alive from inside it), with the spares it did not use: once the
// command buffer has passed `finished`, a later recording into an application's command buffer
// takes all of it again (Device::take_spare), so that an engine's loop creates nothing.
struct RetiredResources {
  SetCache sets;
  std::vector<BufferHandles> buffers;
  VkQueryPool query_pool = VK_NULL_HANDLE;
  std::vector<VkEvent> events;         // set by the command buffer (the last one: `finished`)
  std::vector<VkEvent> spare_events;   // never recorded
  VkEvent finished = VK_NULL_HANDLE;   // null: nothing pending (nothing recorded), or unknown (`pending`)
  bool pending = false;                // commands after the last event: freed with the Context
  VkCommandBuffer command_buffer = VK_NULL_HANDLE;  // the application's, for release_recordings()
};

// relpos's own submissions in flight, so that host access to mapped memory waits for relpos's own
// work only, never for the application's work on a shared queue.
class Submissions {
 public:
  std::uint64_t begin();
  void end(std::uint64_t ticket);
  // Waits until every submission begun before this call has ended.
  void wait_for_earlier();

 private:
  std::mutex mutex_;
  std::condition_variable ended_;
  std::uint64_t next_ = 0;
  std::set<std::uint64_t> running_;
};

struct Device {
  // Creation undoes itself: each object relpos creates is paired, right after its creation, with
  // its destruction in `cleanups`, which ~Device runs in reverse. A constructor that throws
  // half-way thus destroys exactly what it made, and nothing is called through a table that was
  // never loaded.
  std::vector<std::function<void()>> cleanups;

  InstanceFunctions fn;
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  bool owns_device = false;
  VkQueue queue = VK_NULL_HANDLE;
  std::uint32_t queue_family = 0;
  VolkDeviceTable vk{};

  DeviceInfo info;
  DeviceLimits limits;
  VkPhysicalDeviceMemoryProperties memory{};
  bool validation = false;
  bool staging_only = false;
  // Dispatches push their bindings into the command buffer (VK_KHR_push_descriptor, enabled where
  // the device has it and allows kMaxBindings; an adopted device where the application enabled it):
  // no descriptor set is allocated or written, so none can be written while a command buffer that
  // used it is still pending (an engine's steps in flight). Otherwise descriptor sets (and under the
  // validation layer's GPU-assisted mode, which misreads pushed descriptors).
  bool push_descriptors = false;
  std::uint32_t max_push_descriptors = 0;  // VkPhysicalDevicePushDescriptorPropertiesKHR, where it has the extension
  // ContextOptions::tuning, resolved: kernels Cpu or Gpu; compile_only (ops plan, check and compile,
  // and record and run nothing; buffers are host memory only) and pipeline_statistics (pipelines
  // created with CAPTURE_STATISTICS, where the device has VK_KHR_pipeline_executable_properties)
  // only for contexts relpos creates.
  Tuning tuning{DistanceExpansion::Auto, Kernels::Cpu, false, false};
  std::uint32_t gpu_attention_lanes = 0;  // TestingOptions: attention_tiled's lanes, 0 = its own choice
  std::uint32_t gpu_shuffle_lanes = 0;    // TestingOptions: the GPU class's shuffles within this many lanes, 0 = the subgroup
  // Where the device's compute subgroups may have several sizes: the size every pipeline whose
  // shader uses subgroup operations is created with (full subgroups), limits.subgroup_size; 0 where
  // there is one size (or the device states no range), and none is asked.
  std::uint32_t required_subgroup_size = 0;
  std::uint32_t max_workgroup_subgroups = 0;  // with it: maxComputeWorkgroupSubgroups
  // Where there is one size and computeFullSubgroups is enabled: that size. A pipeline whose shader
  // uses subgroup operations and whose workgroup is a whole number of such subgroups is created with
  // full subgroups, which the kernels that number their lanes subgroup by subgroup rely on (Vulkan
  // promises none without). 0 otherwise (where the size is pinned, required_subgroup_size asks it).
  std::uint32_t full_subgroup_size = 0;
  std::atomic<std::uint64_t> validation_messages{0};
  std::function<void(const ValidationMessage&)> on_message;

  // The queue is externally synchronised: every vkQueueSubmit/vkQueueWaitIdle holds this lock. It
  // is the application's mutex for an adopted queue that it shares (AdoptedVulkan::queue_mutex).
  std::mutex own_queue_mutex;
  std::mutex* queue_mutex = &own_queue_mutex;
  Submissions submissions;

  // What relpos has created (relpos/resource_counts.hpp).
  struct Counters {
    std::atomic<std::uint64_t> buffers{0}, memory_allocations{0}, descriptor_pools{0}, descriptor_sets{0}, events{0}, pipelines{0},
        command_buffers{0}, query_pools{0};
  } counters;

  VkPipelineCache pipeline_cache = VK_NULL_HANDLE;
  // ContextOptions::pipeline_cache_path: its file for this device (empty: none), and the size of
  // the cache's data when last read or written (so that an unchanged cache is not rewritten).
  std::filesystem::path pipeline_cache_file;
  std::size_t pipeline_cache_saved_bytes = 0;
  std::mutex pipeline_cache_save_mutex;
  std::function<void(const std::string&)> warn;
  void save_pipeline_cache();
  std::mutex pipeline_mutex;
  std::map<PipelineKey, Pipeline, PipelineKeyLess> pipelines;
  // Descriptor set layouts of n storage buffers (compute stage), one per n, shared by every
  // pipeline binding n: a set written for one kernel variant serves any other (a plan's step whose
  // key splits change its variant takes no new set). Under pipeline_mutex.
  std::map<std::uint32_t, VkDescriptorSetLayout> set_layouts;
  VkDescriptorSetLayout storage_set_layout(std::uint32_t bindings);

  // Resources of recorders destroyed while their commands may still be pending in an application's
  // command buffer; once the command buffer has set the last event (or the application said it was
  // reset, release_recordings), they are spare, for the next recording into an application's
  // command buffer to take; freed with the Context.
  std::mutex retired_mutex;
  std::list<RetiredResources> retired;
  std::list<RetiredResources> spare;
  // What destroyed Recorders of relpos's own leave, every command of theirs executed: the command
  // pool (its one command buffer reset) and fence, and the resources of the last recording. The
  // next own Recorder takes the latest (last in, first out), so that a loop making one Recorder a
  // step creates nothing after the first; there are as many as Recorders were alive at once. Kept
  // apart from `spare`, whose descriptor sets an application's pending command buffer may still
  // use (under retired_mutex).
  struct OwnCommands {
    VkCommandPool pool = VK_NULL_HANDLE;
    VkCommandBuffer cb = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
  };
  struct OwnSpare {
    OwnCommands commands;
    RetiredResources resources;
  };
  std::vector<OwnSpare> own_spare;
  void give_back_own(OwnSpare&& s);
  std::optional<OwnSpare> take_own();
  // The resources of a finished or pending recording as handles (what retire() keeps).
  RetiredResources retired_of(RecordingResources&& r, std::list<Buffer>&& spare_scratch, std::list<MemoryUse>&& spare_uses,
                              std::vector<VkEvent>&& spare_events, VkCommandBuffer cb);
  // release_recordings' log for plans, whose step slots wait for an event an abandoned command
  // buffer never sets: a counter of releases, and the count at each command buffer's last release
  // (one entry per command buffer ever released). A step recorded into cb when the counter read E
  // has been released once released_at[cb] > E.
  std::uint64_t releases = 0;
  std::map<VkCommandBuffer, std::uint64_t> released_at;
  void note_release(VkCommandBuffer cb);
  std::uint64_t release_count();
  bool released_since(VkCommandBuffer cb, std::uint64_t count);

  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device();

  std::unique_lock<std::mutex> lock_queue() { return std::unique_lock(*queue_mutex); }

  // The pipeline of an embedded shader with its specialisation constants (which must follow its
  // contract, src/shaders/contracts.hpp), compiled once and cached.
  const Pipeline& pipeline(ShaderId shader, const SpecValues& spec);

  // A descriptor pool of `sets` sets of `bindings` storage buffers each (counted).
  VkDescriptorPool create_descriptor_pool(std::uint32_t sets, std::uint32_t bindings);
  VkDescriptorSet allocate_descriptor_set(VkDescriptorPool pool, VkDescriptorSetLayout layout);

  // Memory type for `type_bits` with the properties `use` asks for.
  std::uint32_t memory_type(std::uint32_t type_bits, bool host_visible) const;

  // Runs `record` in a one-time command buffer and waits for it.
  void run_once(const std::function<void(VkCommandBuffer)>& record);
  // Submits `cb` (under the queue lock), signalling `fence`, and waits for the fence.
  void submit_and_wait(VkCommandBuffer cb, VkFence fence);
  // The two halves: submit() returns the ticket under which `submissions` counts the work in
  // flight, wait() waits for the fence and ends it (host access to mapped memory waits for it
  // meanwhile).
  std::uint64_t submit(VkCommandBuffer cb, VkFence fence);
  void wait(VkFence fence, std::uint64_t ticket);

  // Frees `r` now (its commands have executed or were never submitted).
  void free_resources(RecordingResources& r);
  void free_sets(SetCache& sets);
  // Takes the resources of a recording into the application's command buffer `cb`, whose commands
  // may still be pending, with the spare buffers and events it did not use.
  void retire(RecordingResources&& r, std::list<Buffer>&& spare_scratch, std::list<MemoryUse>&& spare_uses, std::vector<VkEvent>&& spare_events,
              VkCommandBuffer cb);
  // Moves the retired resources whose command buffer has set its last event to the spares (all of
  // those recorded into `cb`, which the application reset or freed, when given); with `all`, frees
  // every retired and spare resource (the Context ends: the application's command buffers have
  // finished).
  void free_retired(bool all, VkCommandBuffer cb = VK_NULL_HANDLE);
  // One spare recording's resources, its events reset; nothing when there is none.
  std::optional<RetiredResources> take_spare();

  void report(const ValidationMessage& m);
};

}  // namespace relpos::detail
