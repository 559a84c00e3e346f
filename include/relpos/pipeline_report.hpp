#pragma once
// What the driver's compiler made of each pipeline a Context created: the shader, its
// specialisation constants by name, the workgroup size, and, with
// Tuning::pipeline_statistics on a device with VK_KHR_pipeline_executable_properties,
// each executable's statistics (registers, spills, shared memory, instruction counts, ... under the
// driver's own names). `relpos stats` prints them.
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace relpos {

class Context;

struct PipelineStatistic {
  std::string name;         // the driver's name, e.g. RADV's "VGPRs", "Spilled VGPRs"
  std::string description;
  double value = 0.0;       // booleans as 0 or 1
  // Integer statistics (counts, hashes) exactly, beyond double's 53 bits.
  bool integer = false;
  std::int64_t integer_value = 0;
};

struct PipelineExecutable {
  std::string name;         // e.g. "Compute Shader"
  std::string description;
  std::uint32_t subgroup_size = 0;  // the one the driver compiled for
  std::vector<PipelineStatistic> statistics;
};

struct PipelineReport {
  std::string shader;  // the shaders/*.comp file it was compiled from (without .comp)
  std::vector<std::pair<std::string, std::uint32_t>> constants;  // specialisation constants by name, by constant_id
  std::array<std::uint32_t, 3> workgroup{1, 1, 1};
  std::vector<PipelineExecutable> executables;  // empty without statistics
};

// Whether the context keeps executable statistics.
bool has_pipeline_statistics(const Context& ctx);
// Every pipeline the context has created so far; statistics only when asked for (and kept).
std::vector<PipelineReport> pipeline_reports(const Context& ctx, bool with_statistics = true);

}  // namespace relpos
