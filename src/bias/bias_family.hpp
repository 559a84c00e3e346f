#pragma once
// The bias registry (docs/ARCHITECTURE.md, "The bias registry"): each position bias family that
// fused attention takes is described once, in its own source (src/ops/<family>.cpp, or
// src/bias/plain_families.cpp for those with no op of their own), and the registry (registry.cpp)
// lists them. Parameter checks, the CPU reference, fused attention, its plans and the tool ask the
// registry; nothing else switches on the family.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "relpos/attention.hpp"
#include "relpos/context.hpp"

namespace relpos::detail {

class DistanceRows;
class OpStorage;

struct BiasFamily {
  AttentionBiasInfo info;
  std::uint32_t kernel_mode = 0;  // RELPOS_ATTN_*: how the kernels read the bias (relpos_push/attention.h)
  // Whether the bias may hold -inf, masking keys: the kernels then keep a masked key's value out of
  // its row wherever they read one (spec BIAS_MAY_MASK). True only where the user gives the values
  // themselves (dense, a per-distance row); a family whose rows relpos computes from its parameters
  // (T5, kerple, sandwich) or whose bias is a formula (ALiBi, Shaw) gives finite values, and a -inf
  // in T5's table is outside its contract (docs/fused_attention.md).
  bool may_mask = false;
  // The shape of the bias input's float32 values (AttentionBuffers::bias) for p, outermost first;
  // null: the family takes none.
  std::vector<std::uint64_t> (*input_shape)(const AttentionParams& p) = nullptr;
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
  // input is not the rows themselves, the input their parameters): made for an envelope, their
  // buffers from `storage`; each call records the rows of attention_row_window(p).
  std::unique_ptr<DistanceRows> (*rows)(Context& ctx, const AttentionParams& envelope, OpStorage& storage) = nullptr;
  // Adds the bias into float32 logits [batch, heads, queries, keys] (attention_unfused, the fused
  // op's baseline). Null: the baseline does not take the family.
  void (*add_to_logits)(Recorder& r, const AttentionParams& p, const Buffer& input, const Buffer& logits) = nullptr;
};

// The family of a bias mode; InvalidArgument naming `bias` for a value no family has.
const BiasFamily& bias_family(AttentionBias bias);
// Every family, in the registry's order.
std::span<const BiasFamily* const> bias_families();

}  // namespace relpos::detail
