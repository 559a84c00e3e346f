#pragma once
// The bias registry (docs/ARCHITECTURE.md, "The bias registry"): each position bias family that
// fused attention takes is described once, in its own src/bias/<family>_family.cpp, and the
// registry (registry.cpp) lists them. Parameter checks, the CPU reference, fused attention, its
// plans and the tool ask the registry; nothing else switches on the family.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "relpos/attention.hpp"
#include "relpos/context.hpp"

namespace relpos::detail {

class DescriptorSource;
class OpStorage;

// A family's per-distance rows that fused attention computes from the caller's bias input before
// its kernels read them (RELPOS_ATTN_ROW). Made once for an envelope (a plan's, or one call's).
class BiasRows {
 public:
  virtual ~BiasRows() = default;
  // Records the rows [heads, queries + keys - 1] of p's window (laid out for
  // p.row_query_offset(), unmasked) into `rows` from `input`, the caller's bias buffer; ends with
  // the barrier that makes them readable. Descriptor sets from `sets` (a plan's) or the recording.
  virtual void record(Recorder& r, const AttentionParams& p, const Buffer& input, const Buffer& rows, DescriptorSource* sets) = 0;
};

struct BiasFamily {
  AttentionBiasInfo info;
  std::uint32_t kernel_mode = 0;  // RELPOS_ATTN_*: how the kernels read the bias (relpos_push/attention.h)
  // float32 values of the bias input (AttentionBuffers::bias) for p; null: the family takes none.
  std::uint64_t (*input_elements)(const AttentionParams& p) = nullptr;
  // Checks of the family's own fields of AttentionParams (part of AttentionParams::validate).
  void (*validate)(const AttentionParams& p) = nullptr;
  // Checks of the input's values where they are on the host (the reference; the tool).
  void (*check_input)(const AttentionParams& p, std::span<const float> input) = nullptr;
  // What the family's reads need of the device beyond the kernels' own bindings.
  void (*check_device)(const DeviceLimits& lim, const AttentionParams& p) = nullptr;
  // The reference's bias of head h, query i, key j at the local relative position rp (memory keys
  // have none). Null: no additive bias.
  float (*bias_at)(const AttentionParams& p, std::span<const float> input, std::uint32_t h, std::uint32_t i, std::uint32_t j,
                   std::int64_t rp) = nullptr;
  // The input of `to`, a window of `from`'s: to's query i is from's query q0 + i and its key j
  // from's key k0 + j (both windows' positions consistent: equal rp for equal pairs). Null: the
  // input does not depend on the window.
  std::vector<float> (*sub_input)(const AttentionParams& from, std::span<const float> input, const AttentionParams& to,
                                  std::uint32_t q0, std::uint32_t k0) = nullptr;
  // rel_tables: the row of rel_keys and rel_values at relative position rp.
  std::uint32_t (*rel_row)(const AttentionParams& p, std::int64_t rp) = nullptr;
  // The per-distance rows fused attention computes from the input (RELPOS_ATTN_ROW families whose
  // input is not the rows themselves): made for an envelope, their buffers from `storage`.
  std::unique_ptr<BiasRows> (*rows)(Context& ctx, const AttentionParams& envelope, OpStorage& storage) = nullptr;
  // Adds the bias into float32 logits [batch, heads, queries, keys] (attention_unfused, the fused
  // op's baseline). Null: the baseline does not take the family.
  void (*add_to_logits)(Recorder& r, const AttentionParams& p, const Buffer& input, const Buffer& logits) = nullptr;
};

// The family of a bias mode; InvalidArgument naming `bias` for a value no family has.
const BiasFamily& bias_family(AttentionBias bias);
// Every family, in the registry's order.
std::span<const BiasFamily* const> bias_families();

}  // namespace relpos::detail
