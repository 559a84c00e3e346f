#include "stats_summary.hpp"

#include <algorithm>
#include <cstdio>
#include <iterator>

namespace relpos::tool {
namespace {

std::string number(double v) {
  char buf[32];
  if (v == static_cast<double>(static_cast<long long>(v))) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  else std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// The figures the occupancy comes from, under the driver's names.
std::string figures(const PipelineExecutable& e) {
  static const char* const shown[] = {"VGPRs", "SGPRs", "LDS size", "Spilled VGPRs", "Spilled SGPRs", "Scratch size", "Max dispatch width",
                                      "Max live registers", "Workgroup Memory Size", "Spill Count", "Fill Count", "Scratch Memory Size",
                                      "Number of GPRs", "SLM Size"};
  static const char* const only_nonzero[] = {"Spilled VGPRs", "Spilled SGPRs", "Scratch size", "Spill Count", "Fill Count", "Scratch Memory Size",
                                             "SLM Size"};
  std::string out;
  for (const char* name : shown)
    for (const PipelineStatistic& s : e.statistics) {
      if (s.name != name) continue;
      const bool optional = std::find_if(std::begin(only_nonzero), std::end(only_nonzero), [&](const char* n) { return s.name == n; }) !=
                            std::end(only_nonzero);
      if (optional && s.value == 0) continue;
      out += (out.empty() ? "" : ", ") + s.name + " " + number(s.value);
    }
  return out;
}

}  // namespace

std::string summary_header(const DeviceInfo& device, const std::optional<GpuArchitecture>& arch) {
  std::string out = "relpos stats --summary on " + device.name + " (" + device.driver + "): ";
  if (!arch) return out + "no occupancy table for this device (AMD through RADV and Intel through ANV have one; NVK reports no shared memory)";
  char buf[256];
  if (arch->amd)
    std::snprintf(buf, sizeof buf, "%s, per %s: %u SIMDs, %u KiB LDS, %u wave slots and %u wave64 VGPRs per SIMD", arch->name.c_str(),
                  arch->compute_unit.c_str(), arch->simds, arch->shared_bytes / 1024, arch->slots, arch->vgprs_wave64);
  else
    std::snprintf(buf, sizeof buf, "%s, per %s: %u EUs of %u threads, %u KiB shared local memory", arch->name.c_str(), arch->compute_unit.c_str(), arch->simds, arch->slots,
                  arch->shared_bytes / 1024);
  return out + buf;
}

nlohmann::ordered_json occupancy_json(const std::optional<GpuArchitecture>& arch, const PipelineReport& pipeline, const PipelineExecutable& executable) {
  if (!arch) return nullptr;
  const std::optional<Occupancy> o = occupancy(*arch, pipeline, executable);
  if (!o) return nullptr;
  nlohmann::ordered_json j;
  j["unit"] = o->unit;
  j["value"] = o->value;
  j["maximum"] = o->maximum;
  j["simd_width"] = o->simd_width;
  j["limited_by"] = o->limited_by;
  if (o->by_registers >= 0) j["by_registers"] = o->by_registers;
  if (o->by_shared_memory >= 0) j["by_shared_memory"] = o->by_shared_memory;
  j["by_workgroup"] = o->by_workgroup;
  if (!o->note.empty()) j["note"] = o->note;
  return j;
}

std::string summary_line(const std::optional<GpuArchitecture>& arch, const std::string& op, const std::string& use, const PipelineReport& pipeline,
                         const PipelineExecutable& executable, const nlohmann::ordered_json& variant) {
  std::string occ = "occupancy unknown";
  if (arch)
    if (const std::optional<Occupancy> o = occupancy(*arch, pipeline, executable)) {
      occ = number(o->value) + " " + o->unit + " (of " + number(o->maximum) + "), limited by " + o->limited_by;
      std::string alone;
      if (o->by_registers >= 0) alone += "registers " + number(o->by_registers);
      if (o->by_shared_memory >= 0) alone += (alone.empty() ? "" : ", ") + std::string("shared memory ") + number(o->by_shared_memory);
      alone += (alone.empty() ? "" : ", ") + std::string("workgroup ") + number(o->by_workgroup);
      occ += " [alone: " + alone + "]";
      if (!o->note.empty()) occ += "; " + o->note;
    }
  char head[160];
  std::snprintf(head, sizeof head, "%-18s %-30s %-7s wg %-4u ", op.c_str(), pipeline.shader.c_str(), use.empty() ? "-" : use.c_str(),
                pipeline.workgroup[0] * pipeline.workgroup[1] * pipeline.workgroup[2]);
  return head + occ + " | " + figures(executable) + " | " + variant.dump();
}

}  // namespace relpos::tool
