// Occupancy from the compilers' figures: docs/gpu_compilers.md, "Occupancy", gives each formula and
// where the figures come from (AMD's ISA guides and Mesa's ac_gpu_info.c / aco_ir.cpp /
// radv_get_max_waves; Intel's intel_device_info.c, intel_compute_slm.c and brw_simd_selection.cpp).
#include "occupancy.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <limits>

namespace relpos::tool {
namespace {

constexpr std::uint32_t kUnlimited = std::numeric_limits<std::uint32_t>::max();

// The chip RADV or ANV names in the device name's last parentheses: "... (RADV NAVI21)" -> navi21,
// "Intel(R) Arc(tm) A770M Graphics (DG2)" -> dg2, "(TGL GT2)" -> tgl.
std::string chip_of(const std::string& name) {
  const std::size_t open = name.rfind('('), close = name.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  std::string inside = name.substr(open + 1, close - open - 1);
  if (inside.rfind("RADV ", 0) == 0) inside = inside.substr(5);
  inside = inside.substr(0, inside.find(' '));
  for (char& c : inside) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return inside;
}

bool one_of(const std::string& chip, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return chip == n; });
}

std::optional<GpuArchitecture> amd(const std::string& chip) {
  GpuArchitecture a;
  a.amd = true;
  if (one_of(chip, {"tonga", "iceland", "fiji", "carrizo", "stoney", "polaris10", "polaris11", "polaris12", "vegam", "vega10", "vega12", "vega20",
                    "raven", "raven2", "renoir"})) {
    const bool polaris = one_of(chip, {"polaris10", "polaris11", "polaris12", "vegam"});
    const bool gfx9 = one_of(chip, {"vega10", "vega12", "vega20", "raven", "raven2", "renoir"});
    a.name = std::string(gfx9 ? "GCN5" : "GCN3/4") + " (" + chip + ")";
    a.compute_unit = "CU", a.simds = 4, a.shared_bytes = 64 * 1024, a.shared_granule = 512, a.slots = polaris ? 8 : 10;
    a.vgprs_wave64 = 256, a.vgpr_granule_wave64 = 4, a.sgprs = 800, a.max_workgroups = 16;
    return a;
  }
  const bool rdna1 = one_of(chip, {"navi10", "navi12", "navi14"});
  const bool rdna2 = one_of(chip, {"navi21", "navi22", "navi23", "navi24", "vangogh", "rembrandt", "raphael_mendocino", "mendocino"});
  const bool rdna3 = one_of(chip, {"navi31", "navi32", "navi33", "phoenix", "phoenix2", "gfx1150", "gfx1151", "gfx1152", "gfx1153"});
  const bool rdna4 = one_of(chip, {"navi44", "navi48"});
  if (!rdna1 && !rdna2 && !rdna3 && !rdna4) return std::nullopt;
  // RDNA3's navi31/32 and Strix Halo (gfx1151), and RDNA4, have 1.5x the register file.
  const bool big_file = rdna4 || one_of(chip, {"navi31", "navi32", "gfx1151"});
  a.name = std::string(rdna1 ? "RDNA1" : rdna2 ? "RDNA2" : rdna3 ? "RDNA3" : "RDNA4") + " (" + chip + ")";
  a.compute_unit = "WGP", a.simds = 4, a.shared_bytes = 128 * 1024, a.shared_granule = rdna1 ? 512 : 1024, a.slots = rdna1 ? 20 : 16;
  a.vgprs_wave64 = big_file ? 768 : 512, a.vgpr_granule_wave64 = big_file ? 12 : rdna1 ? 4 : 8;
  a.sgprs = 0, a.max_workgroups = 32;
  return a;
}

std::optional<GpuArchitecture> intel(const std::string& chip) {
  GpuArchitecture a;
  if (one_of(chip, {"tgl", "rkl", "adl", "rpl", "dg1", "sg1"})) {
    a.name = "Xe-LP (" + chip + ")", a.compute_unit = "DSS", a.intel_ver = 120, a.simds = 16, a.slots = 7, a.shared_bytes = 64 * 1024, a.widest_simd = 16;
  } else if (one_of(chip, {"dg2", "mtl", "arl"})) {
    a.name = std::string(chip == "dg2" ? "Xe-HPG" : "Xe-LPG") + " (" + chip + ")", a.intel_ver = 125, a.compute_unit = "Xe-core";
    a.simds = 16, a.slots = 8, a.shared_bytes = 128 * 1024, a.widest_simd = 16;
  } else if (one_of(chip, {"bmg", "lnl"})) {
    a.name = "Xe2 (" + chip + ")", a.compute_unit = "Xe-core", a.intel_ver = 200, a.simds = 8, a.slots = 8, a.shared_bytes = 128 * 1024, a.widest_simd = 32;
  } else {
    return std::nullopt;
  }
  return a;
}

double statistic(const PipelineExecutable& e, const char* name, bool* found = nullptr) {
  for (const PipelineStatistic& s : e.statistics)
    if (s.name == name) {
      if (found) *found = true;
      return s.value;
    }
  if (found) *found = false;
  return 0;
}

std::uint32_t align_up(std::uint32_t v, std::uint32_t granule) { return (v + granule - 1) / granule * granule; }

// Shared memory a workgroup of `bytes` is given (intel_compute_slm_calculate_size).
std::uint32_t intel_slm_allocation(std::uint32_t ver, std::uint32_t bytes) {
  if (bytes == 0) return 0;
  if (ver >= 200) {
    for (std::uint32_t kb : {1u, 2u, 4u, 8u, 16u, 24u, 32u, 48u, 64u, 96u, 128u, 192u, 256u, 384u})
      if (kb * 1024 >= bytes) return kb * 1024;
    return bytes;
  }
  return std::max<std::uint32_t>(std::bit_ceil(bytes), 1024);
}

// The limiting resources: those whose workgroup count is the smallest.
void settle(Occupancy& o, std::uint32_t units, std::uint32_t per_workgroup, std::uint32_t by_regs, std::uint32_t by_shared,
            std::uint32_t by_cap, std::uint32_t by_slots) {
  const std::uint32_t groups = std::min({by_regs, by_shared, by_cap, by_slots});
  auto per_unit = [&](std::uint32_t g) { return std::min(o.maximum, double(g) * per_workgroup / units); };
  o.value = per_unit(groups);
  if (by_regs != kUnlimited) o.by_registers = per_unit(by_regs);
  if (by_shared != kUnlimited) o.by_shared_memory = per_unit(by_shared);
  o.by_workgroup = per_unit(std::min(by_cap, by_slots));
  if (o.value >= o.maximum) {  // the hardware's own maximum: a resource that ties it limits nothing
    o.limited_by = "nothing";
    return;
  }
  std::string limits;
  auto add = [&](bool on, const char* what) {
    if (on && limits.find(what) == std::string::npos) limits += (limits.empty() ? "" : ", ") + std::string(what);
  };
  add(by_regs == groups, "registers");
  add(by_shared == groups, "shared memory");
  add(by_cap == groups || (by_slots == groups && o.value < o.maximum), "workgroup size");
  o.limited_by = limits.empty() ? "nothing" : limits;
}

}  // namespace

std::optional<GpuArchitecture> gpu_architecture(const DeviceInfo& device) {
  const std::string chip = chip_of(device.name);
  if (device.vendor_id == 0x1002) return amd(chip);
  if (device.vendor_id == 0x8086) return intel(chip);
  return std::nullopt;
}

std::optional<Occupancy> occupancy(const GpuArchitecture& arch, const PipelineReport& pipeline, const PipelineExecutable& e) {
  const std::uint64_t lanes64 = std::uint64_t{pipeline.workgroup[0]} * pipeline.workgroup[1] * pipeline.workgroup[2];
  const std::uint32_t lanes = static_cast<std::uint32_t>(std::min<std::uint64_t>(lanes64, 1u << 20));
  Occupancy o;
  if (arch.amd) {
    bool has_vgprs = false, has_lds = false;
    const auto vgprs = static_cast<std::uint32_t>(statistic(e, "VGPRs", &has_vgprs));
    const auto lds = static_cast<std::uint32_t>(statistic(e, "LDS size", &has_lds));
    const auto sgprs = static_cast<std::uint32_t>(statistic(e, "SGPRs"));
    if (!has_vgprs || !has_lds) return std::nullopt;
    const std::uint32_t wave = e.subgroup_size ? e.subgroup_size : 64, scale = 64 / std::min<std::uint32_t>(wave, 64);
    const std::uint32_t waves = (lanes + wave - 1) / wave;
    o.unit = "waves" + std::to_string(wave) + " per SIMD";
    o.simd_width = wave;
    o.maximum = arch.slots;
    // radv_get_max_waves / ACO: VGPRs allocated in granules from the SIMD's file (twice the count for wave32).
    const std::uint32_t granule = arch.vgpr_granule_wave64 * scale;
    std::uint32_t reg_waves = arch.vgprs_wave64 * scale / align_up(std::max(vgprs, 1u), granule);
    if (arch.sgprs && sgprs) reg_waves = std::min(reg_waves, arch.sgprs / align_up(sgprs, 16));
    const std::uint32_t by_regs = reg_waves * arch.simds / waves;
    const std::uint32_t by_shared = lds ? arch.shared_bytes / align_up(lds, arch.shared_granule) : kUnlimited;
    const std::uint32_t by_cap = waves > 1 ? arch.max_workgroups : kUnlimited;
    settle(o, arch.simds, waves, by_regs, by_shared, by_cap, arch.slots * arch.simds / waves);
    return o;
  }
  bool has_width = false, has_slm = false;
  const auto max_width = static_cast<std::uint32_t>(statistic(e, "Max dispatch width", &has_width));
  const auto slm = static_cast<std::uint32_t>(statistic(e, "Workgroup Memory Size", &has_slm));
  if (!has_width || !has_slm) return std::nullopt;
  const std::uint32_t width = e.subgroup_size ? e.subgroup_size : max_width;
  if (width == 0) return std::nullopt;
  const std::uint32_t threads = (lanes + width - 1) / width;
  o.unit = "threads per EU";
  o.simd_width = width;
  o.maximum = arch.slots;
  // Every hardware thread has its own 128 registers (the default GRF mode), so registers never
  // cost threads: they cost width. The compiler drops a width that would spill (brw_simd_selection).
  const bool narrowed = width < arch.widest_simd && lanes > width;
  const std::uint32_t by_shared = slm ? arch.shared_bytes / intel_slm_allocation(arch.intel_ver, slm) : kUnlimited;
  settle(o, arch.simds, threads, kUnlimited, by_shared, kUnlimited, arch.slots * arch.simds / threads);
  if (narrowed) {
    o.limited_by = o.limited_by == "nothing" ? "registers" : "registers, " + o.limited_by;
    o.note = "SIMD" + std::to_string(width) + ": SIMD" + std::to_string(width * 2) + " did not fit the registers";
  }
  if (statistic(e, "Spill Count") > 0 || statistic(e, "Fill Count") > 0) o.note += std::string(o.note.empty() ? "" : "; ") + "spills";
  return o;
}

}  // namespace relpos::tool
