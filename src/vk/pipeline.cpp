// Compute pipelines of the embedded shaders, cached per (ShaderId, specialization constants).
#include <algorithm>
#include <string>

#include "shaders/embedded.hpp"
#include "vk/device.hpp"

namespace relpos::detail {
namespace {
// Whether a module declares a GroupNonUniform* capability (its lanes exchange values in subgroups).
// Capabilities are a module's first instructions, after the 5-word header.
bool uses_subgroups(const EmbeddedShader& s) {
  constexpr std::uint32_t kOpCapability = 17, kGroupNonUniform = 61, kGroupNonUniformQuad = 68;
  for (std::size_t i = 5; i + 1 < s.word_count && (s.words[i] & 0xffffu) == kOpCapability && (s.words[i] >> 16) != 0; i += s.words[i] >> 16)
    if (s.words[i + 1] >= kGroupNonUniform && s.words[i + 1] <= kGroupNonUniformQuad) return true;
  return false;
}
// Device::set_layouts' layout of n bindings, made at its first use; the caller holds pipeline_mutex.
VkDescriptorSetLayout shared_set_layout(Device& d, std::uint32_t n) {
  if (auto it = d.set_layouts.find(n); it != d.set_layouts.end()) return it->second;
  std::vector<VkDescriptorSetLayoutBinding> bindings(n);
  for (std::uint32_t b = 0; b < n; ++b) bindings[b] = {b, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  if (d.push_descriptors) dl.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
  dl.bindingCount = n;
  dl.pBindings = bindings.data();
  VkDescriptorSetLayout layout = VK_NULL_HANDLE;
  vk_check(d.vk.vkCreateDescriptorSetLayout(d.device, &dl, nullptr, &layout), "vkCreateDescriptorSetLayout");
  d.set_layouts.emplace(n, layout);
  return layout;
}
}  // namespace

VkDescriptorSetLayout Device::storage_set_layout(std::uint32_t bindings) {
  std::lock_guard lock(pipeline_mutex);
  return shared_set_layout(*this, bindings);
}

const Pipeline& Device::pipeline(ShaderId shader, const SpecValues& spec_values) {
  check_contract(shader, spec_values);
  const std::span<const std::uint32_t> spec = spec_values.values();
  // Looked up on every dispatch: by a view of the key, without allocating.
  const PipelineKeyView key{shader, spec};
  std::lock_guard lock(pipeline_mutex);
  if (auto it = pipelines.find(key); it != pipelines.end()) return it->second;

  const EmbeddedShader& s = embedded_shader(shader);
  Pipeline p;
  p.binding_count = static_cast<std::uint32_t>(shader_contract(shader).bindings.size());
  if (limits.max_storage_buffers_per_stage && p.binding_count > limits.max_storage_buffers_per_stage)
    throw Error("shader " + std::string(s.name) + " binds " + std::to_string(p.binding_count) +
                " storage buffers; the device allows " + std::to_string(limits.max_storage_buffers_per_stage) +
                " per stage (maxPerStageDescriptorStorageBuffers)");
  const std::array<std::uint32_t, 3> wg = workgroup_size(shader, spec);
  if (wg[0] == 0 || wg[1] == 0 || wg[0] > limits.max_workgroup_size[0] || wg[1] > limits.max_workgroup_size[1] ||
      std::uint64_t{wg[0]} * wg[1] > limits.max_workgroup_invocations)
    throw Error("internal: workgroup size " + std::to_string(wg[0]) + "x" + std::to_string(wg[1]) + " exceeds the device limit");

  // A failure half-way destroys what was made (the cache holds only whole pipelines).
  struct Partial {
    Device& d;
    Pipeline& p;
    bool done = false;
    ~Partial() {
      if (done) return;
      if (p.layout) d.vk.vkDestroyPipelineLayout(d.device, p.layout, nullptr);
    }
  } partial{*this, p};

  p.set_layout = shared_set_layout(*this, p.binding_count);

  // Every push-constant block fits the 128 bytes Vulkan guarantees.
  VkPushConstantRange pc{VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
  VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pl.setLayoutCount = 1;
  pl.pSetLayouts = &p.set_layout;
  pl.pushConstantRangeCount = 1;
  pl.pPushConstantRanges = &pc;
  vk_check(vk.vkCreatePipelineLayout(device, &pl, nullptr, &p.layout), "vkCreatePipelineLayout");

  VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mi.codeSize = s.word_count * 4;
  mi.pCode = s.words;
  VkShaderModule module = VK_NULL_HANDLE;
  vk_check(vk.vkCreateShaderModule(device, &mi, nullptr, &module), "vkCreateShaderModule");

  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (std::uint32_t i = 0; i < spec.size(); ++i) entries[i] = {i, i * 4u, 4};
  VkSpecializationInfo si{static_cast<std::uint32_t>(entries.size()), entries.data(), spec.size() * 4, spec.data()};
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = spec.empty() ? nullptr : &si;
  // The subgroup size the kernels were planned with, in full subgroups where the workgroup is
  // whole subgroups (pin_subgroup_size, context.cpp); on a device of one size, full subgroups alone.
  VkPipelineShaderStageRequiredSubgroupSizeCreateInfo required{VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
  if (required_subgroup_size && uses_subgroups(s)) {
    if (std::uint64_t{wg[0]} * wg[1] > std::uint64_t{required_subgroup_size} * max_workgroup_subgroups)
      throw Error("internal: workgroup size " + std::to_string(wg[0]) + "x" + std::to_string(wg[1]) + " needs more than the device's " +
                  std::to_string(max_workgroup_subgroups) + " subgroups of " + std::to_string(required_subgroup_size) +
                  " (maxComputeWorkgroupSubgroups)");
    required.requiredSubgroupSize = required_subgroup_size;
    ci.stage.pNext = &required;
    if (wg[0] % required_subgroup_size == 0) ci.stage.flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
  } else if (full_subgroup_size && wg[0] % full_subgroup_size == 0 && uses_subgroups(s)) {
    ci.stage.flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
  }
  ci.layout = p.layout;
  if (tuning.pipeline_statistics) ci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  VkResult r = vk.vkCreateComputePipelines(device, pipeline_cache, 1, &ci, nullptr, &p.pipeline);
  vk.vkDestroyShaderModule(device, module, nullptr);
  vk_check(r, "vkCreateComputePipelines");
  ++counters.pipelines;
  partial.done = true;
  return pipelines.emplace(PipelineKey{shader, {spec.begin(), spec.end()}}, p).first->second;
}

const char* vk_result_name(VkResult r) {
  switch (r) {
#define RELPOS_CASE(x) \
  case x: return #x;
    RELPOS_CASE(VK_SUCCESS)
    RELPOS_CASE(VK_NOT_READY)
    RELPOS_CASE(VK_TIMEOUT)
    RELPOS_CASE(VK_INCOMPLETE)
    RELPOS_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    RELPOS_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    RELPOS_CASE(VK_ERROR_INITIALIZATION_FAILED)
    RELPOS_CASE(VK_ERROR_DEVICE_LOST)
    RELPOS_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    RELPOS_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    RELPOS_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    RELPOS_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    RELPOS_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    RELPOS_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    RELPOS_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    RELPOS_CASE(VK_ERROR_FRAGMENTED_POOL)
    RELPOS_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
#undef RELPOS_CASE
    default: return "VkResult error";
  }
}

}  // namespace relpos::detail
