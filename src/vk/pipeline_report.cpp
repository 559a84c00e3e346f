// pipeline_reports(): each pipeline's specialisation constants named by its shader's contract
// (src/shaders/contracts.hpp), and the driver asked for each executable's statistics.
#include "relpos/pipeline_report.hpp"

#include <cstring>

#include "relpos/context.hpp"
#include "shaders/embedded.hpp"
#include "vk/access.hpp"
#include "vk/device.hpp"

namespace relpos {
namespace {

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
      if (s.format == VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR) st.integer = PipelineStatistic::Integer::Signed, st.signed_value = s.value.i64;
      if (s.format == VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR) st.integer = PipelineStatistic::Integer::Unsigned, st.unsigned_value = s.value.u64;
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
  std::vector<PipelineReport> out;
  for (const auto& [key, pipeline] : pipelines) {
    PipelineReport r;
    r.shader = std::string(detail::embedded_shader(key.shader).name);
    for (const contract::SpecConstant& c : detail::shader_contract(key.shader).spec) r.constants.emplace_back(c.name, key.spec[c.id]);
    r.workgroup = detail::workgroup_size(key.shader, key.spec);
    if (with_statistics) r.executables = executables_of(*dev, pipeline);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace relpos
