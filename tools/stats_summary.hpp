#pragma once
// `relpos stats --summary`: one line per pipeline with its occupancy on the device (occupancy.hpp)
// and what limits it; with --json, each record gains an "occupancy" object.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "occupancy.hpp"

namespace relpos::tool {

// The first line: the device and the compute unit its occupancy is counted on.
std::string summary_header(const DeviceInfo& device, const std::optional<GpuArchitecture>& arch);

// One pipeline's line; `use` is "prefill", "decode" or empty.
std::string summary_line(const std::optional<GpuArchitecture>& arch, const std::string& op, const std::string& use, const PipelineReport& pipeline,
                         const PipelineExecutable& executable, const nlohmann::ordered_json& variant);

// {"unit", "value", "maximum", "simd_width", "limited_by", "by_registers", ...}, or null where the
// device has no table or the statistics lack what the formula needs.
nlohmann::ordered_json occupancy_json(const std::optional<GpuArchitecture>& arch, const PipelineReport& pipeline, const PipelineExecutable& executable);

}  // namespace relpos::tool
