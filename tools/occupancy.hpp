#pragma once
// How many subgroups of a pipeline a GPU keeps in flight, worked out from the driver's statistics
// (registers, shared memory, SIMD width) and what one compute unit of that GPU holds. Vulkan reports
// no register file or shared-memory pool per compute unit, so those come from a table per
// architecture; docs/gpu_compilers.md gives the formulas and their sources.
#include <relpos/context.hpp>
#include <relpos/pipeline_report.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace relpos::tool {

// One compute unit: an AMD CU (GCN) or WGP (RDNA: RADV compiles compute shaders in WGP mode), an
// Intel dual subslice / Xe-core.
struct GpuArchitecture {
  bool amd = false;                 // else Intel
  std::string name;                 // e.g. "RDNA2 (navi21)"
  std::string compute_unit;         // "CU", "WGP", "DSS", "Xe-core"
  std::uint32_t simds = 0;          // AMD: SIMDs per CU/WGP; Intel: EUs (vector engines) per Xe-core
  std::uint32_t shared_bytes = 0;   // LDS per CU/WGP; SLM per Xe-core
  std::uint32_t shared_granule = 0; // AMD: LDS allocation granule (Intel: powers of two, Xe2 a table)
  std::uint32_t slots = 0;          // AMD: wave slots per SIMD; Intel: hardware threads per EU
  std::uint32_t vgprs_wave64 = 0;   // AMD: VGPRs per SIMD counted for wave64 (twice that for wave32)
  std::uint32_t vgpr_granule_wave64 = 0;
  std::uint32_t sgprs = 0;          // AMD GCN: SGPRs per SIMD (0: SGPRs never limit, RDNA)
  std::uint32_t max_workgroups = 0; // AMD: workgroups of several waves per CU/WGP
  std::uint32_t widest_simd = 0;    // Intel: the widest width the compiler tries without being asked
  std::uint32_t intel_ver = 0;      // Intel: 12 (Xe-LP), 125 (Xe-HPG/LPG), 200 (Xe2)
};

// The device's architecture where relpos has a table for it (RADV and ANV devices name it).
std::optional<GpuArchitecture> gpu_architecture(const DeviceInfo& device);

struct Occupancy {
  std::string unit;        // "waves64 per SIMD", "waves32 per SIMD", "threads per EU"
  double value = 0;        // averaged over the compute unit's SIMDs/EUs: may be fractional
  double maximum = 0;      // the hardware's
  std::uint32_t simd_width = 0;  // lanes per wave / per Intel hardware thread
  // What each resource alone allows, in the same unit (negative: not a limit for this pipeline).
  double by_registers = -1, by_shared_memory = -1, by_workgroup = -1;
  std::string limited_by;  // "registers", "shared memory", "workgroup size" (several joined by ", "), or "nothing"
  std::string note;        // e.g. Intel's "SIMD8: SIMD16 did not fit the registers"
};

// Occupancy of one executable, or nothing where the statistics lack what it needs.
std::optional<Occupancy> occupancy(const GpuArchitecture& arch, const PipelineReport& pipeline, const PipelineExecutable& executable);

}  // namespace relpos::tool
