// The thin runtime: device choice, buffers, recording into an application's own command buffer on
// its own Vulkan objects, timestamps, validation reporting.
#include <vulkan/vulkan.h>  // the application's Vulkan: the system loader's own symbols

#include <relpos/relpos.hpp>

#include <chrono>
#include <future>
#include <stdexcept>

#include "support/app_vulkan.hpp"
#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "ceiling.hpp"
#include "testing_options.hpp"

using namespace relpos;
using relpos::test::GpuTest;
using relpos::test::gpu;
using relpos::test::gpu_expansion;
using relpos::test::AppVulkan;
using relpos::test::run;

namespace {

DeviceInfo dev(std::uint32_t index, const std::string& name, DeviceType type) {
  DeviceInfo d;
  d.index = index;
  d.name = name;
  d.type = type;
  d.has_compute = true;
  d.api_version = VK_API_VERSION_1_3;
  return d;
}

class Runtime : public GpuTest {};

}  // namespace

TEST(DevicePick, PrefersDiscreteThenIntegratedThenVirtualThenCpu) {
  ::unsetenv("RELPOS_DEVICE");
  std::vector<DeviceInfo> all = {dev(0, "llvmpipe (LLVM 15.0.6, 256 bits)", DeviceType::Cpu),
                                 dev(1, "Intel(R) UHD Graphics 620", DeviceType::Integrated),
                                 dev(2, "NVIDIA H100 80GB HBM3", DeviceType::Discrete)};
  EXPECT_EQ(Context::pick_device(all, ""), 2u);
  all.pop_back();
  EXPECT_EQ(Context::pick_device(all, ""), 1u);
  all.pop_back();
  EXPECT_EQ(Context::pick_device(all, ""), 0u);
  std::vector<DeviceInfo> virt = {dev(0, "cpu", DeviceType::Cpu), dev(1, "virtio", DeviceType::Virtual)};
  EXPECT_EQ(Context::pick_device(virt, ""), 1u);
}

TEST(DevicePick, SelectorByIndexOrNameSubstring) {
  ::unsetenv("RELPOS_DEVICE");
  std::vector<DeviceInfo> all = {dev(0, "llvmpipe (LLVM 15.0.6, 256 bits)", DeviceType::Cpu),
                                 dev(1, "NVIDIA H100 80GB HBM3", DeviceType::Discrete)};
  EXPECT_EQ(Context::pick_device(all, "0"), 0u);
  EXPECT_EQ(Context::pick_device(all, "LLVMPIPE"), 0u);
  EXPECT_EQ(Context::pick_device(all, "h100"), 1u);
  EXPECT_THROW(Context::pick_device(all, "7"), InvalidArgument);
  EXPECT_THROW(Context::pick_device(all, "radeon"), InvalidArgument);
  ::setenv("RELPOS_DEVICE", "llvm", 1);
  EXPECT_EQ(Context::pick_device(all, ""), 0u);
  EXPECT_EQ(Context::pick_device(all, "nvidia"), 1u);  // an explicit selector wins over the variable
  ::unsetenv("RELPOS_DEVICE");
  all[1].has_compute = false;
  EXPECT_EQ(Context::pick_device(all, ""), 0u);
}

TEST_F(Runtime, ContextReportsDeviceAndLimits) {
  Context& ctx = gpu();
  EXPECT_FALSE(ctx.device_info().name.empty());
  EXPECT_TRUE(ctx.validation_enabled());
  EXPECT_GE(ctx.limits().max_storage_buffer_range, 1u << 16);
  EXPECT_GE(ctx.limits().max_workgroup_count[0], 1u);
  EXPECT_GT(ctx.limits().timestamp_period_ns, 0.0);
}

TEST_F(Runtime, BufferRoundTripsAndChecksRanges) {
  std::vector<std::uint32_t> v(1000);
  for (std::uint32_t i = 0; i < v.size(); ++i) v[i] = i * 2654435761u;
  Buffer b = make_buffer(gpu(), v);
  EXPECT_EQ(b.size(), 4000u);
  EXPECT_EQ(b.capacity() % 16, 0u);
  EXPECT_EQ(b.download<std::uint32_t>(1000), v);
  std::uint32_t x = 7;
  b.upload(&x, 4, 396);
  EXPECT_EQ(b.download<std::uint32_t>(1, 396)[0], 7u);
  EXPECT_THROW(b.upload(&x, 4, 3998), InvalidArgument);
  EXPECT_THROW(b.download<std::uint32_t>(1001), InvalidArgument);
  EXPECT_THROW(Buffer(gpu(), 0), InvalidArgument);
}

// Device memory that is not mapped (a discrete GPU's) goes through staging buffers.
TEST_F(Runtime, StagingPathRoundTrips) {
  ContextOptions o;
  o.validation = true;
  o.on_validation_message = [](const ValidationMessage& m) { ADD_FAILURE() << m.id << ": " << m.text; };
  detail::TestingOptions t;
  t.staging_only = true;
  Context ctx = detail::testing_context(o, t);
  std::vector<float> v(100003);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  Buffer b = make_buffer(ctx, v);
  EXPECT_FALSE(b.host_mapped());
  EXPECT_EQ(b.download<float>(v.size()), v);
  float x = -1.0f;
  b.upload(&x, 4, 40000);
  EXPECT_EQ(b.download<float>(1, 40000)[0], -1.0f);
  // GPU work on an unmapped buffer, read back through staging.
  T5Params p;
  p.queries = 33;
  p.keys = 17;
  Buffer out(ctx, 33 * 17 * 4);
  run(ctx, [&](Recorder& r) { t5_buckets(r, p, out); });
  EXPECT_EQ(out.download<std::int32_t>(33 * 17), t5_buckets_reference(p));
}

// TestingOptions only ever lower what the context believes of its device, and only its own.
TEST_F(Runtime, TestingContextsLowerTheirLimitsOnly) {
  const DeviceLimits& device = gpu().limits();
  ContextOptions o;
  o.validation = true;
  o.on_validation_message = [](const ValidationMessage& m) { ADD_FAILURE() << m.id << ": " << m.text; };
  detail::TestingOptions t;
  t.max_storage_buffer_range = 4096;
  t.max_workgroup_count = 3;
  t.no_subgroup_shuffles = true;
  const Context lowered = detail::testing_context(o, t);
  EXPECT_EQ(lowered.limits().max_storage_buffer_range, std::min<std::uint64_t>(4096, device.max_storage_buffer_range));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(lowered.limits().max_workgroup_count[i], std::min(3u, device.max_workgroup_count[i]));
  EXPECT_FALSE(lowered.limits().subgroup_shuffle);
  EXPECT_EQ(lowered.limits().min_storage_buffer_offset_alignment, device.min_storage_buffer_offset_alignment);

  detail::TestingOptions above;  // limits above the device's keep the device's
  above.max_storage_buffer_range = device.max_storage_buffer_range + 1;
  above.max_workgroup_count = 0xffffffffu;
  const Context same = detail::testing_context(o, above);
  EXPECT_EQ(same.limits().max_storage_buffer_range, device.max_storage_buffer_range);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(same.limits().max_workgroup_count[i], device.max_workgroup_count[i]);
  EXPECT_EQ(same.limits().subgroup_shuffle, device.subgroup_shuffle);
}

TEST_F(Runtime, TimestampsMeasureRecordedWork) {
  T5Params p;
  p.queries = p.keys = 256;
  Buffer out(gpu(), 256 * 256 * 4);
  Recorder r(gpu());
  auto a = r.write_timestamp();
  t5_buckets(r, p, out);
  auto b = r.write_timestamp();
  r.submit_and_wait();
  EXPECT_GT(r.elapsed_ms(a, b), 0.0);
  EXPECT_LT(r.elapsed_ms(a, b), 10000.0);
  EXPECT_THROW(r.elapsed_ms(a, 5), InvalidArgument);
}

// Recorder::time_dispatches: the shader and time of each dispatch recorded while it is on, in
// order, inside the bracket of the recording's own timestamps; transfer commands are not timed; a
// submission without timing leaves no times.
TEST_F(Runtime, DispatchTimesNameEachTimedDispatch) {
  T5Params p;
  p.queries = p.keys = 256;
  const std::uint64_t bytes = 256 * 256 * 4;
  Buffer out(gpu(), bytes), copy(gpu(), bytes);
  Recorder r(gpu());
  fill_u32(r, out, bytes, 0);  // before timing: not listed
  r.time_dispatches(true);
  const auto a = r.write_timestamp();
  t5_buckets(r, p, out);
  const std::uint32_t t5_dispatches = r.dispatch_count() - 1;
  copy_transfer(r, out, copy, bytes);
  fill_u32(r, copy, bytes, 0x3f800000u);
  const auto b = r.write_timestamp();
  r.time_dispatches(false);
  fill_u32(r, out, bytes, 0);  // after timing: not listed
  EXPECT_TRUE(r.dispatch_times().empty());  // nothing finished yet
  r.submit_and_wait();
  const std::vector<DispatchTime> times = r.dispatch_times();
  ASSERT_EQ(times.size(), t5_dispatches + 1);
  double sum = 0;
  for (std::size_t k = 0; k < times.size(); ++k) {
    SCOPED_TRACE(times[k].shader);
    EXPECT_EQ(times[k].shader, k < t5_dispatches ? "t5_distance_row" : "fill");
    EXPECT_GT(times[k].ms, 0.0);
    sum += times[k].ms;
  }
  EXPECT_LE(sum, r.elapsed_ms(a, b));
  EXPECT_EQ(copy.download<float>(4), std::vector<float>(4, 1.0f));
  fill_u32(r, out, bytes, 0);
  r.submit_and_wait();
  EXPECT_TRUE(r.dispatch_times().empty());
}

// A recording holds 1024 timestamps: a timed dispatch that would take them past that is refused
// before any of it is recorded (with one timestamp left it would have recorded the dispatch and
// then thrown), and the recording still runs, with the dispatches before it timed.
TEST_F(Runtime, DispatchTimingPastTheTimestampsIsRefused) {
  Buffer out(gpu(), 1024);
  Recorder r(gpu());
  r.write_timestamp();
  r.time_dispatches(true);
  for (std::uint32_t k = 0; k < 511; ++k) fill_u32(r, out, 1024, k);  // 1023 timestamps
  relpos::test::expect_invalid([&] { fill_u32(r, out, 1024, 0xdeadu); }, "1024");
  r.submit_and_wait();
  EXPECT_EQ(r.dispatch_times().size(), 511u);
  EXPECT_EQ(out.download<std::uint32_t>(1), std::vector<std::uint32_t>{510u});
}

// submit() returns while the work runs; the recorder refuses to record until wait(), which gives
// the results and readies it for the next recording; a recorder destroyed in flight waits.
TEST_F(Runtime, SubmitThenWaitOverlapsTheHost) {
  const std::uint64_t bytes = 1 << 20;
  Buffer out(gpu(), bytes), again(gpu(), bytes);
  Recorder r(gpu());
  EXPECT_FALSE(r.in_flight());
  fill_u32(r, out, bytes, 0x3f800000u);
  const auto a = r.write_timestamp();
  r.submit();
  EXPECT_TRUE(r.in_flight());
  relpos::test::expect_invalid([&] { fill_u32(r, again, bytes, 0); }, "wait()");
  EXPECT_THROW(r.write_timestamp(), InvalidArgument);
  r.wait();
  EXPECT_FALSE(r.in_flight());
  EXPECT_EQ(out.download<float>(4), std::vector<float>(4, 1.0f));
  EXPECT_GE(r.elapsed_ms(a, a), 0.0);
  r.wait();  // nothing in flight: nothing to do
  fill_u32(r, again, bytes, 0x40000000u);
  r.submit_and_wait();
  EXPECT_EQ(again.download<float>(4), std::vector<float>(4, 2.0f));
  {
    Recorder gone(gpu());
    fill_u32(gone, out, bytes, 0x40400000u);
    gone.submit();
  }
  EXPECT_EQ(out.download<float>(4), std::vector<float>(4, 3.0f));
}

TEST_F(Runtime, ValidationMessagesAreReported) {
  // A deliberately invalid call must reach the messenger: the hook the whole suite relies on.
  ASSERT_TRUE(gpu().validation_enabled());
  const auto before = gpu().validation_message_count();
  VkBufferCreateInfo bad{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bad.size = 16;
  bad.usage = 0;  // VUID-VkBufferCreateInfo-usage-requiredbitmask
  auto create = reinterpret_cast<PFN_vkCreateBuffer>(vkGetDeviceProcAddr(gpu().vk_device(), "vkCreateBuffer"));
  auto destroy = reinterpret_cast<PFN_vkDestroyBuffer>(vkGetDeviceProcAddr(gpu().vk_device(), "vkDestroyBuffer"));
  VkBuffer buf = VK_NULL_HANDLE;
  if (create(gpu().vk_device(), &bad, nullptr, &buf) == VK_SUCCESS && buf) destroy(gpu().vk_device(), buf, nullptr);
  EXPECT_GT(gpu().validation_message_count(), before);
  EXPECT_FALSE(relpos::test::take_validation_messages().empty());
}

// The benchmark ceilings, by shader and by transfer command, write exactly their bytes: a ceiling
// that wrote less would flatter no op but undersell every one.
TEST_F(Runtime, CeilingKernelsWriteTheirBytes) {
  Context& ctx = gpu();
  const std::vector<std::uint32_t> before(100, 7u);
  std::vector<std::uint32_t> source(100);
  for (std::uint32_t k = 0; k < source.size(); ++k) source[k] = k * 2654435761u;
  for (bool transfer : {false, true}) {
    SCOPED_TRACE(transfer ? "transfer" : "shader");
    Buffer a = make_buffer(ctx, before), b = make_buffer(ctx, source);
    run(ctx, [&](Recorder& r) {
      if (transfer) fill_u32_transfer(r, a, 96 * 4, 0xabcdu);
      else fill_u32(r, a, 96 * 4, 0xabcdu);
    });
    std::vector<std::uint32_t> want = before;
    std::fill(want.begin(), want.begin() + 96, 0xabcdu);
    EXPECT_EQ(a.download<std::uint32_t>(100), want);
    run(ctx, [&](Recorder& r) {
      if (transfer) copy_transfer(r, b, a, 64 * 4);
      else copy_u32(r, b, a, 64 * 4);
    });
    std::copy(source.begin(), source.begin() + 64, want.begin());
    EXPECT_EQ(a.download<std::uint32_t>(100), want);
    Recorder r(ctx);
    EXPECT_THROW(transfer ? fill_u32_transfer(r, a, 101 * 4, 0) : fill_u32(r, a, 104 * 4, 0), InvalidArgument);
    EXPECT_THROW(transfer ? copy_transfer(r, b, a, 6) : copy_u32(r, b, a, 8), InvalidArgument);
  }
}

// A buffer with its own memory, made the way an application makes one on relpos's device (through
// the device's entry points), destroyed with its memory.
struct AppBuffer {
  VkDevice device;
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  template <class F>
  F entry(const char* name) const { return reinterpret_cast<F>(vkGetDeviceProcAddr(device, name)); }
  AppBuffer(VkDevice d, VkDeviceSize bytes, VkBufferUsageFlags usage) : device(d) {
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.size = bytes;
    bi.usage = usage;
    if (entry<PFN_vkCreateBuffer>("vkCreateBuffer")(device, &bi, nullptr, &buffer) != VK_SUCCESS) throw std::runtime_error("vkCreateBuffer");
    VkMemoryRequirements req{};
    entry<PFN_vkGetBufferMemoryRequirements>("vkGetBufferMemoryRequirements")(device, buffer, &req);
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    while (!(req.memoryTypeBits & (1u << ai.memoryTypeIndex))) ++ai.memoryTypeIndex;
    if (entry<PFN_vkAllocateMemory>("vkAllocateMemory")(device, &ai, nullptr, &memory) != VK_SUCCESS ||
        entry<PFN_vkBindBufferMemory>("vkBindBufferMemory")(device, buffer, memory, 0) != VK_SUCCESS) {
      this->~AppBuffer();
      throw std::runtime_error("vkAllocateMemory / vkBindBufferMemory");
    }
  }
  AppBuffer(const AppBuffer&) = delete;
  AppBuffer& operator=(const AppBuffer&) = delete;
  ~AppBuffer() {
    entry<PFN_vkDestroyBuffer>("vkDestroyBuffer")(device, buffer, nullptr);
    if (memory) entry<PFN_vkFreeMemory>("vkFreeMemory")(device, memory, nullptr);
  }
};

// An application's buffer without TRANSFER_DST usage (or with its usage unknown) is written by the
// shader even where copies are asked for, since a copy into it would be invalid; with the usage
// given, by transfer copies. Validation would report the invalid copy.
TEST_F(Runtime, ExternalBuffersTakeCopiesOnlyWithTransferDstUsage) {
  Context& ctx = gpu_expansion(DistanceExpansion::Copies);
  const VkDevice device = ctx.vk_device();
  AlibiParams p;
  p.heads = 2;
  p.queries = 5;
  p.keys = 16;
  const std::uint64_t bytes = 2 * 5 * 16 * 4;
  constexpr VkBufferUsageFlags kNoDst = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
  struct Case {
    VkBufferUsageFlags created, told;
    std::uint32_t dispatches;  // 1: the per-distance row, then copies; 3: row, shifted copies, expansion
  };
  for (const Case c : {Case{kNoDst, 0, 3}, Case{kNoDst, kNoDst, 3}, Case{kNoDst | VK_BUFFER_USAGE_TRANSFER_DST_BIT, 0, 3},
                       Case{kNoDst | VK_BUFFER_USAGE_TRANSFER_DST_BIT, kNoDst | VK_BUFFER_USAGE_TRANSFER_DST_BIT, 1}}) {
    const AppBuffer app(device, bytes, c.created);
    {
      Buffer out = Buffer::external(ctx, app.buffer, bytes, c.told);
      EXPECT_EQ(out.transfer_writable(), c.dispatches == 1);
      Recorder r(ctx);
      alibi_bias(r, p, out);
      EXPECT_EQ(r.dispatch_count(), c.dispatches) << "usage " << c.created << " told " << c.told;
      r.submit_and_wait();
      EXPECT_EQ(out.download<float>(bytes / 4), alibi_bias_reference(p));
    }
  }
}

// upload() and download() of an external buffer are transfer copies: one whose given usage lacks
// TRANSFER_DST is refused by upload(), one lacking TRANSFER_SRC by download(), before any copy is
// recorded (the copy would be invalid: validation reports it, a GPU may do anything). A usage left
// unknown (0) is the application's to answer for.
TEST_F(Runtime, ExternalUploadAndDownloadNeedTheirTransferUsage) {
  Context& ctx = gpu();
  const VkDevice device = ctx.vk_device();
  constexpr VkBufferUsageFlags kStorage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  const std::vector<float> values{1, 2, 3, 4};
  {
    constexpr VkBufferUsageFlags usage = kStorage | VK_BUFFER_USAGE_TRANSFER_SRC_BIT;  // 0x21
    const AppBuffer app(device, 16, usage);
    Buffer b = Buffer::external(ctx, app.buffer, 16, usage);
    relpos::test::expect_invalid([&] { b.upload(std::span<const float>(values)); },
                                 "Buffer::upload: the external buffer's usage = 0x21: must include VK_BUFFER_USAGE_TRANSFER_DST_BIT");
    EXPECT_NO_THROW(b.upload(values.data(), 0));  // nothing to copy, nothing refused
    EXPECT_EQ(b.download<float>(4).size(), 4u);
  }
  {
    constexpr VkBufferUsageFlags usage = kStorage | VK_BUFFER_USAGE_TRANSFER_DST_BIT;  // 0x22
    const AppBuffer app(device, 16, usage);
    Buffer b = Buffer::external(ctx, app.buffer, 16, usage);
    b.upload(std::span<const float>(values));
    relpos::test::expect_invalid([&] { (void)b.download<float>(4); },
                                 "Buffer::download: the external buffer's usage = 0x22: must include VK_BUFFER_USAGE_TRANSFER_SRC_BIT");
  }
  {
    const AppBuffer app(device, 16, relpos::test::kAppBufferUsage);
    Buffer b = Buffer::external(ctx, app.buffer, 16);  // usage unknown: both allowed
    b.upload(std::span<const float>(values));
    EXPECT_EQ(b.download<float>(4), values);
  }
}

// An application with its own instance, device, queue and command buffer (made through the system
// loader's exported functions) adopts them into relpos and records T5 into its own command buffer.
TEST(AdoptedDevice, RecordsIntoTheApplicationsCommandBuffer) {
  AppVulkan app;
  // Both expansion paths: the shader's dispatches and the transfer copies land in the application's
  // command buffer, and release() makes either visible to the host.
  for (DistanceExpansion path : {DistanceExpansion::Shader, DistanceExpansion::Copies}) {
    SCOPED_TRACE(path == DistanceExpansion::Copies ? "copies" : "shader");
    ContextOptions options;
    options.tuning.distance_expansion = path;
    Context ctx(app.adopted(), options);
    T5Params p;
    p.queries = 20;
    p.keys = 30;
    p.heads = 3;
    std::vector<float> table(32 * 3);
    for (std::size_t k = 0; k < table.size(); ++k) table[k] = static_cast<float>(k);
    Buffer t = make_buffer(ctx, table);
    Buffer out(ctx, 3 * 20 * 30 * 4);
    const VkCommandBuffer cb = app.begin_command_buffer();
    {
      Recorder rec(ctx, cb);
      rec.time_dispatches(path == DistanceExpansion::Shader);
      t5_bias(rec, p, t, out);
      rec.release(VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
      const std::uint32_t dispatches = rec.dispatch_count();
      app.submit_and_wait(cb);
      EXPECT_THROW(rec.submit_and_wait(), InvalidArgument);
      // Timed: each dispatch of the application's finished submission.
      const std::vector<DispatchTime> times = rec.dispatch_times();
      EXPECT_GT(dispatches, 0u);
      EXPECT_EQ(times.size(), path == DistanceExpansion::Shader ? dispatches : 0u);
      for (const DispatchTime& time : times) EXPECT_GT(time.ms, 0.0) << time.shader;
    }
    EXPECT_EQ(out.download<float>(3 * 20 * 30), t5_bias_reference(p, table));
  }
  // relpos released only what it created (AppVulkan destroys the rest, under validation).
  EXPECT_EQ(app.take_messages(), std::vector<std::string>{});
}

// A wrong queue family is refused with an error, and the failed construction leaves the
// application's device as it was (it used to wait on the device through a table never loaded).
TEST(AdoptedDevice, WrongQueueFamilyIsAnErrorAndLeavesTheDeviceUsable) {
  AppVulkan app;
  AdoptedVulkan bad = app.adopted();
  bad.queue_family = app.family_count + 7;
  try {
    Context ctx(bad);
    ADD_FAILURE() << "queue_family " << bad.queue_family << " was adopted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("queue_family = " + std::to_string(bad.queue_family)), std::string::npos) << e.what();
  }
  Context ctx(app.adopted());
  T5Params p;
  p.queries = 6;
  p.keys = 7;
  Buffer out(ctx, 6 * 7 * 4);
  run(ctx, [&](Recorder& r) { t5_buckets(r, p, out); });
  EXPECT_EQ(out.download<std::int32_t>(6 * 7), t5_buckets_reference(p));
  EXPECT_EQ(app.take_messages(), std::vector<std::string>{});
}

// relpos calls Vulkan 1.1 functions and loads SPIR-V 1.3: an instance created for Vulkan 1.0 is
// refused, and the application must say which version it created the instance with.
TEST(AdoptedDevice, RefusesAnInstanceBelowVulkan11AndAnUnstatedVersion) {
  AppVulkan app(VK_API_VERSION_1_0);
  AdoptedVulkan a = app.adopted();
  try {
    Context ctx(a);
    ADD_FAILURE() << "a Vulkan 1.0 instance was adopted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("api_version = 1.0"), std::string::npos) << e.what();
  }
  a.api_version = 0;
  EXPECT_THROW(Context ctx(a), InvalidArgument);
  EXPECT_EQ(app.take_messages(), std::vector<std::string>{});
}

// Shaders store f16 values two to a 32-bit word. An application's buffer of an odd number of f16
// values ends mid-word, and the last value used to be dropped silently; such a buffer is refused,
// and one rounded up to whole words gets every value, the last one included.
TEST_F(Runtime, ExternalBuffersEndOnAWordSoOddF16TensorsAreExact) {
  Context& ctx = gpu();
  const VkDevice device = ctx.vk_device();
  T5Params p;  // 1 head x 3 queries x 5 keys = 15 f16 values = 30 bytes
  p.queries = 3;
  p.keys = 5;
  std::vector<float> table(32);
  for (std::size_t k = 0; k < table.size(); ++k) table[k] = 0.578125f + 0.25f * static_cast<float>(k);
  Buffer t = make_buffer(ctx, table);
  const std::vector<std::uint16_t> want = to_half(t5_bias_reference(p, table));
  ASSERT_EQ(want.size(), 15u);
  for (VkDeviceSize bytes : {VkDeviceSize{30}, VkDeviceSize{32}}) {
    SCOPED_TRACE(bytes);
    const VkBufferUsageFlags usage = relpos::test::kAppBufferUsage;
    const AppBuffer app(device, bytes, usage);
    if (bytes % 4 != 0) {
      try {
        Buffer::external(ctx, app.buffer, bytes, usage);
        ADD_FAILURE() << "an external buffer of " << bytes << " bytes was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("bytes = 30: must be a multiple of 4"), std::string::npos) << e.what();
      }
    } else {
      Buffer out = Buffer::external(ctx, app.buffer, bytes, usage);
      const std::vector<std::uint16_t> ones(16, float_to_half(1.0f));
      out.upload(std::span<const std::uint16_t>(ones));
      run(ctx, [&](Recorder& r) { t5_bias(r, p, t, out, DType::F16); });
      std::vector<std::uint16_t> want_padded = want;
      want_padded.push_back(ones.back());  // the value past the tensor is the application's, left alone
      EXPECT_EQ(out.download<std::uint16_t>(16), want_padded);
      out.upload(std::span<const std::uint16_t>(ones));
      run(ctx, [&](Recorder& r) { t5_bias_add(r, p, t, out, DType::F16); });
      std::vector<float> sum = t5_bias_reference(p, table);
      for (float& x : sum) x = half_to_float(float_to_half(x + 1.0f));
      std::vector<std::uint16_t> want_sum = to_half(sum);
      want_sum.push_back(ones.back());
      EXPECT_EQ(out.download<std::uint16_t>(16), want_sum);
    }
  }
}

// The application may destroy a Recorder that recorded into its command buffer before that buffer
// runs: the descriptor sets and scratch buffers stay until the commands have executed.
TEST(AdoptedDevice, RecorderMayGoBeforeTheCommandBufferRuns) {
  AppVulkan app;
  Context ctx(app.adopted());
  T5Params t5;
  t5.queries = 9;
  t5.keys = 11;
  t5.heads = 2;
  std::vector<float> table(32 * 2);
  for (std::size_t k = 0; k < table.size(); ++k) table[k] = 0.5f * static_cast<float>(k) - 3.0f;
  AlibiParams alibi;
  alibi.heads = 3;
  alibi.queries = 5;
  alibi.keys = 16;
  Buffer t = make_buffer(ctx, table);
  Buffer t5_out(ctx, 2 * 9 * 11 * 4), alibi_out(ctx, 3 * 5 * 16 * 4);
  VkCommandBuffer cb = app.begin_command_buffer();
  {
    Recorder rec(ctx, cb);
    t5_bias(rec, t5, t, t5_out);
    alibi_bias(rec, alibi, alibi_out);
    rec.release(VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
  }
  // Other work in between allocates descriptor pools and scratch memory, which would reuse what a
  // destroyed recorder had freed.
  for (int k = 0; k < 3; ++k) {
    Buffer other(ctx, 2 * 9 * 11 * 4);
    run(ctx, [&](Recorder& r) { t5_bias(r, t5, t, other); });
    EXPECT_EQ(other.download<float>(2 * 9 * 11), t5_bias_reference(t5, table));
  }
  app.submit_and_wait(cb);
  EXPECT_EQ(t5_out.download<float>(2 * 9 * 11), t5_bias_reference(t5, table));
  EXPECT_EQ(alibi_out.download<float>(3 * 5 * 16), alibi_bias_reference(alibi));
  ctx.wait_idle();  // frees what the recorder left, its command buffer having run
  EXPECT_EQ(app.take_messages(), std::vector<std::string>{});
}

// Uploads and downloads of mapped buffers wait for relpos's own work only: the application's
// work on the shared queue (here blocked on an event the host sets later) does not hold them up.
TEST(AdoptedDevice, MappedUploadsDoNotWaitForTheApplicationsQueueWork) {
  AppVulkan app;
  Context ctx(app.adopted());
  Buffer b(ctx, 64);
  if (!b.host_mapped()) GTEST_SKIP() << "device memory is not host-visible here";
  VkEventCreateInfo ei{VK_STRUCTURE_TYPE_EVENT_CREATE_INFO};
  VkEvent event = VK_NULL_HANDLE;
  ASSERT_EQ(vkCreateEvent(app.device, &ei, nullptr, &event), VK_SUCCESS);
  VkCommandBuffer cb = app.begin_command_buffer();
  vkCmdWaitEvents(cb, 1, &event, VK_PIPELINE_STAGE_HOST_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, nullptr, 0, nullptr, 0, nullptr);
  ASSERT_EQ(vkEndCommandBuffer(cb), VK_SUCCESS);
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  {
    std::lock_guard lock(app.queue_mutex);
    ASSERT_EQ(vkQueueSubmit(app.queue, 1, &si, VK_NULL_HANDLE), VK_SUCCESS);
  }
  const std::vector<std::uint32_t> values(16, 0x12345678u);
  auto io = std::async(std::launch::async, [&] {
    b.upload(std::span<const std::uint32_t>(values));
    return b.download<std::uint32_t>(16);
  });
  const bool done = io.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  vkSetEvent(app.device, event);  // releases the queue either way
  EXPECT_TRUE(done) << "upload/download waited for the application's queue work";
  EXPECT_EQ(io.get(), values);
  {
    std::lock_guard lock(app.queue_mutex);
    ASSERT_EQ(vkQueueWaitIdle(app.queue), VK_SUCCESS);
  }
  vkDestroyEvent(app.device, event, nullptr);
  EXPECT_EQ(app.take_messages(), std::vector<std::string>{});
}

// A compile-only context (relpos stats) plans, checks and compiles, and records and runs nothing:
// its ops count their dispatches and create their pipelines, but no Vulkan buffer, memory or
// command exists; bad input is still refused; buffers round-trip host memory.
TEST_F(Runtime, CompileOnlyContextCompilesAndRecordsNothing) {
  ContextOptions o;
  o.validation = true;
  o.tuning.compile_only = true;
  Context ctx(o);
  KerpleParams p;
  p.heads = 2;
  p.queries = 5;
  p.keys = 40;
  p.r1 = {1.0f, 0.5f};
  p.r2 = {0.5f, 0.25f};
  const std::vector<float> values(2 * 5 * 40, 1.5f);
  Buffer out = make_buffer(ctx, values);
  EXPECT_EQ(out.download<float>(values.size()), values);
  Recorder r(ctx);
  kerple_bias_add(r, p, out);
  EXPECT_GT(r.dispatch_count(), 0u);
  r.submit_and_wait();
  const ResourceCounts c = resource_counts(ctx);
  EXPECT_EQ(c.buffers, 0u);
  EXPECT_EQ(c.memory_allocations, 0u);
  EXPECT_GT(c.pipelines, 0u);
  EXPECT_EQ(out.download<float>(values.size()), values);  // nothing ran
  const std::vector<PipelineReport> reports = pipeline_reports(ctx, false);
  ASSERT_FALSE(reports.empty());
  bool row = false;
  for (const PipelineReport& rep : reports)
    if (rep.shader == "kerple_distance_row") {
      row = true;
      EXPECT_EQ(rep.workgroup, (std::array<std::uint32_t, 3>{64, 1, 1}));
      ASSERT_FALSE(rep.constants.empty());
      EXPECT_EQ(rep.constants[0].first, "WG_X");
      EXPECT_EQ(rep.constants[0].second, 64u);
    }
  EXPECT_TRUE(row);
  Buffer small(ctx, 16);
  relpos::test::expect_invalid([&] { kerple_bias(r, p, small); }, "output buffer");
  EXPECT_EQ(ctx.validation_message_count(), 0u);
}
