// pipeline_reports(): the SPIR-V of each pipeline's shader read for its specialisation constants'
// names and its workgroup size, and the driver asked for each executable's statistics.
#include "relpos/pipeline_report.hpp"

#include <cstring>
#include <map>

#include "relpos/context.hpp"
#include "shaders/embedded.hpp"
#include "vk/access.hpp"
#include "vk/device.hpp"

namespace relpos {
namespace {

// What a module says of its specialisation constants and workgroup size.
struct ModuleInfo {
  std::map<std::uint32_t, std::string> constant_names;  // by constant_id
  std::map<std::uint32_t, std::uint32_t> constant_defaults;
  // Each workgroup dimension: a constant_id (first = true) or a fixed size.
  std::array<std::pair<bool, std::uint32_t>, 3> workgroup{{{false, 1}, {false, 1}, {false, 1}}};
};

ModuleInfo read_module(const detail::EmbeddedShader& s) {
  constexpr std::uint32_t kOpName = 5, kOpExecutionMode = 16, kOpConstant = 43, kOpConstantComposite = 44, kOpSpecConstant = 50,
                          kOpSpecConstantComposite = 51, kOpDecorate = 71;
  constexpr std::uint32_t kDecorationSpecId = 1, kDecorationBuiltIn = 11, kBuiltInWorkgroupSize = 25, kModeLocalSize = 17;
  std::map<std::uint32_t, std::string> names;
  std::map<std::uint32_t, std::uint32_t> spec_ids, values, spec_defaults;
  std::map<std::uint32_t, std::vector<std::uint32_t>> composites;
  std::uint32_t workgroup_id = 0;
  ModuleInfo info;
  for (std::size_t i = 5; i < s.word_count;) {
    const std::uint32_t words = s.words[i] >> 16, op = s.words[i] & 0xffff;
    if (words == 0 || i + words > s.word_count) break;
    const std::uint32_t* w = s.words + i;
    if (op == kOpName && words >= 3) names[w[1]] = reinterpret_cast<const char*>(w + 2);
    if (op == kOpDecorate && words >= 4 && w[2] == kDecorationSpecId) spec_ids[w[1]] = w[3];
    if (op == kOpDecorate && words >= 4 && w[2] == kDecorationBuiltIn && w[3] == kBuiltInWorkgroupSize) workgroup_id = w[1];
    if (op == kOpConstant && words >= 4) values[w[2]] = w[3];
    if (op == kOpSpecConstant && words >= 4) spec_defaults[w[2]] = w[3];
    if ((op == kOpConstantComposite || op == kOpSpecConstantComposite) && words >= 6) composites[w[2]] = {w[3], w[4], w[5]};
    if (op == kOpExecutionMode && words >= 6 && w[2] == kModeLocalSize) info.workgroup = {{{false, w[3]}, {false, w[4]}, {false, w[5]}}};
    i += words;
  }
  const char* axes[] = {"local_size_x", "local_size_y", "local_size_z"};
  std::map<std::uint32_t, std::string> axis_of;  // spec constant result id -> local_size_*
  if (auto it = composites.find(workgroup_id); it != composites.end())
    for (int a = 0; a < 3; ++a) {
      const std::uint32_t id = it->second[a];
      if (auto sid = spec_ids.find(id); sid != spec_ids.end()) {
        info.workgroup[a] = {true, sid->second};
        axis_of[id] = axes[a];
      } else {
        info.workgroup[a] = {false, values.count(id) ? values[id] : 1};
      }
    }
  for (const auto& [id, constant_id] : spec_ids) {
    auto n = names.find(id);
    info.constant_names[constant_id] = n != names.end() && !n->second.empty() ? n->second
                                       : axis_of.count(id)                    ? axis_of[id]
                                                                              : "constant_" + std::to_string(constant_id);
    if (auto d = spec_defaults.find(id); d != spec_defaults.end()) info.constant_defaults[constant_id] = d->second;
  }
  return info;
}

double statistic_value(const VkPipelineExecutableStatisticKHR& s) {
  switch (s.format) {
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: return s.value.b32 ? 1.0 : 0.0;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: return static_cast<double>(s.value.i64);
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: return static_cast<double>(s.value.u64);
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: return s.value.f64;
    default: return 0.0;
  }
}

std::vector<PipelineExecutable> executables_of(detail::Device& d, VkPipeline pipeline) {
  std::vector<PipelineExecutable> out;
  if (!d.tuning.pipeline_statistics || !d.vk.vkGetPipelineExecutablePropertiesKHR || !d.vk.vkGetPipelineExecutableStatisticsKHR) return out;
  VkPipelineInfoKHR pi{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
  pi.pipeline = pipeline;
  std::uint32_t n = 0;
  detail::vk_check(d.vk.vkGetPipelineExecutablePropertiesKHR(d.device, &pi, &n, nullptr), "vkGetPipelineExecutablePropertiesKHR");
  std::vector<VkPipelineExecutablePropertiesKHR> props(n, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR});
  detail::vk_check(d.vk.vkGetPipelineExecutablePropertiesKHR(d.device, &pi, &n, props.data()), "vkGetPipelineExecutablePropertiesKHR");
  for (std::uint32_t e = 0; e < n; ++e) {
    PipelineExecutable x{props[e].name, props[e].description, props[e].subgroupSize, {}};
    VkPipelineExecutableInfoKHR ei{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
    ei.pipeline = pipeline;
    ei.executableIndex = e;
    std::uint32_t m = 0;
    detail::vk_check(d.vk.vkGetPipelineExecutableStatisticsKHR(d.device, &ei, &m, nullptr), "vkGetPipelineExecutableStatisticsKHR");
    std::vector<VkPipelineExecutableStatisticKHR> stats(m, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
    detail::vk_check(d.vk.vkGetPipelineExecutableStatisticsKHR(d.device, &ei, &m, stats.data()), "vkGetPipelineExecutableStatisticsKHR");
    for (const auto& s : stats) {
      PipelineStatistic st{s.name, s.description, statistic_value(s)};
      if (s.format == VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR) st.integer = true, st.integer_value = s.value.i64;
      if (s.format == VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR && s.value.u64 <= static_cast<std::uint64_t>(INT64_MAX))
        st.integer = true, st.integer_value = static_cast<std::int64_t>(s.value.u64);
      x.statistics.push_back(std::move(st));
    }
    out.push_back(std::move(x));
  }
  return out;
}

}  // namespace

bool has_pipeline_statistics(const Context& ctx) { return detail::device_of(ctx)->tuning.pipeline_statistics; }

std::vector<PipelineReport> pipeline_reports(const Context& ctx, bool with_statistics) {
  auto dev = detail::device_of(ctx);
  std::vector<std::pair<detail::PipelineKey, VkPipeline>> pipelines;
  {
    std::lock_guard lock(dev->pipeline_mutex);
    for (const auto& [key, p] : dev->pipelines) pipelines.emplace_back(key, p.pipeline);
  }
  std::map<detail::ShaderId, ModuleInfo> modules;
  std::vector<PipelineReport> out;
  for (const auto& [key, pipeline] : pipelines) {
    const detail::EmbeddedShader& s = detail::embedded_shader(key.shader);
    auto it = modules.find(key.shader);
    if (it == modules.end()) it = modules.emplace(key.shader, read_module(s)).first;
    const ModuleInfo& m = it->second;
    PipelineReport r;
    r.shader = std::string(s.name);
    auto value_of = [&](std::uint32_t id) -> std::uint32_t {
      if (id < key.spec.size()) return key.spec[id];
      auto d = m.constant_defaults.find(id);
      return d != m.constant_defaults.end() ? d->second : 0;
    };
    for (const auto& [id, name] : m.constant_names) r.constants.emplace_back(name, value_of(id));
    for (int a = 0; a < 3; ++a) r.workgroup[a] = m.workgroup[a].first ? value_of(m.workgroup[a].second) : m.workgroup[a].second;
    if (with_statistics) r.executables = executables_of(*dev, pipeline);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace relpos
