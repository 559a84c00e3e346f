#pragma once
// The knobs that tune how relpos shapes its work on a device (ContextOptions::tuning). Every
// default suits every device; they exist for measuring one choice against another (relpos bench,
// relpos --kernels, --expansion), for the tests, and for `relpos stats`'s compiler survey.
#include <optional>
#include <string_view>

namespace relpos {

// How the per-distance biases (T5, ALiBi, KERPLE, Sandwich, Fourier) write their [.., Q, K] output. Every output row
// is a window of one per-distance row, so it can be a compute shader's stores or a transfer copy of
// the window. CPU devices run a copy as a memcpy on their queue thread, which writes faster than
// their shader stores; GPUs do better with the shader. Adds into logits always use the shader.
enum class DistanceExpansion {
  Auto,    // copies on CPU devices with at most 4 threads and rows of at least 1 KiB; shader otherwise
  Shader,  // always the compute shader
  Copies,  // transfer copies whenever the output buffer allows transfer writes
};

// Which class of kernels the ops use where they have two shapes of one computation (fused attention
// so far). Both give the same results within the documented tolerances; they differ in speed.
enum class Kernels {
  Auto,  // Cpu on CPU devices (lavapipe), Gpu on every other device
  Cpu,   // shaped for a CPU device: rows per lane share each key load, subgroup shuffles stand in for
         // shared memory (a CPU device gathers every storage load lane by lane)
  Gpu,   // shaped for a GPU: key and value tiles staged in shared memory by coalesced loads, one query
         // row spread over several lanes, no lane holding a whole key (FlashAttention-2 form)
};
// The names RELPOS_KERNELS and the CLI's --kernels take: "auto", "cpu", "gpu"; nullopt for others.
std::optional<Kernels> kernels_from_name(std::string_view name);

struct Tuning {
  DistanceExpansion distance_expansion = DistanceExpansion::Auto;
  // RELPOS_KERNELS=auto|cpu|gpu in the environment overrides Auto.
  Kernels kernels = Kernels::Auto;
  // Survey mode (`relpos stats`): ops check their inputs, plan their dispatches and create their
  // pipelines, but record and run nothing; buffers hold host memory only (uploads and downloads
  // copy host memory). Works on devices that cannot run anything, such as RADV's null hardware
  // (a real GPU compiler without a GPU), which a normal Context refuses for its lack of memory.
  bool compile_only = false;
  // Keep each pipeline's executable statistics (registers, spills, instruction counts: whatever the
  // driver reports through VK_KHR_pipeline_executable_properties), for pipeline_reports()
  // (relpos/pipeline_report.hpp). Ignored where the device lacks the extension.
  bool pipeline_statistics = false;
};

}  // namespace relpos
