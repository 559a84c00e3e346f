#include "support/gpu_fixture.hpp"

#include <memory>
#include <mutex>

#include "testing_options.hpp"

namespace relpos::test {
namespace {

std::mutex g_mutex;
std::vector<std::string> g_messages;

ContextOptions validated_options() {
  ContextOptions o;
  o.validation = true;
  o.on_validation_message = [](const ValidationMessage& m) {
    std::lock_guard lock(g_mutex);
    g_messages.push_back((m.is_error ? "error [" : "warning [") + m.id + "] " + m.text);
  };
  return o;
}

}  // namespace

Context& gpu() {
  static Context ctx(validated_options());
  return ctx;
}

ContextOptions validated_context_options() { return validated_options(); }

Context& gpu_staging_only() {
  static Context ctx = [] {
    detail::TestingOptions t;
    t.staging_only = true;
    return detail::testing_context(validated_options(), t);
  }();
  return ctx;
}

Context& gpu_small_limits() {
  static Context ctx = [] {
    detail::TestingOptions t;
    t.max_storage_buffer_range = 4096;
    t.max_workgroup_count = 3;
    return detail::testing_context(validated_options(), t);
  }();
  return ctx;
}

Context& gpu_few_workgroups() {
  static Context ctx = [] {
    detail::TestingOptions t;
    t.max_workgroup_count = 3;
    return detail::testing_context(validated_options(), t);
  }();
  return ctx;
}

Context& gpu_expansion(DistanceExpansion path) {
  auto make = [](DistanceExpansion e) {
    ContextOptions o = validated_options();
    o.tuning.distance_expansion = e;
    return Context(o);
  };
  if (path == DistanceExpansion::Auto) return gpu();
  static Context shader = make(DistanceExpansion::Shader);
  if (path == DistanceExpansion::Shader) return shader;
  static Context copies = make(DistanceExpansion::Copies);
  return copies;
}

Context& gpu_without_shuffles() {
  static Context ctx = [] {
    detail::TestingOptions t;
    t.no_subgroup_shuffles = true;
    return detail::testing_context(validated_options(), t);
  }();
  return ctx;
}

Context& gpu_kernels(Kernels kernels) {
  auto make = [](Kernels k) {
    ContextOptions o = validated_options();
    o.tuning.kernels = k;
    return Context(o);
  };
  static Context cpu = make(Kernels::Cpu);
  if (kernels == Kernels::Cpu) return cpu;
  static Context gpu = make(Kernels::Gpu);
  if (kernels == Kernels::Gpu) return gpu;
  return relpos::test::gpu();
}

Context gpu_kernels_tiles(std::uint32_t shared_bytes, std::uint32_t lanes, std::uint32_t workgroups, bool subgroup_shuffles,
                          std::uint32_t binding_range, std::uint32_t shuffle_lanes) {
  ContextOptions o = validated_options();
  o.tuning.kernels = Kernels::Gpu;
  detail::TestingOptions t;
  t.max_shared_memory_bytes = shared_bytes;
  t.gpu_attention_lanes = lanes;
  t.max_workgroup_count = workgroups;
  t.no_subgroup_shuffles = !subgroup_shuffles;
  t.max_storage_buffer_range = binding_range;
  t.gpu_shuffle_lanes = shuffle_lanes;
  return detail::testing_context(o, t);
}

std::vector<std::string> take_validation_messages() {
  std::lock_guard lock(g_mutex);
  return std::exchange(g_messages, {});
}

void GpuTest::SetUp() { take_validation_messages(); }

void GpuTest::TearDown() {
  for (const auto& m : take_validation_messages()) ADD_FAILURE() << "Vulkan validation: " << m;
}

}  // namespace relpos::test
