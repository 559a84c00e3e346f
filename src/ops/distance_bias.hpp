#pragma once
// The GPU side of the per-distance bias kit (docs/ARCHITECTURE.md, "Adding a per-distance bias"):
// a family's row shader, written on shaders/include/relpos/distance_row.glsl, fills the rows
// [heads, Q + K - 1]; the kit checks the outputs, records the rows and expands them into a
// [heads, Q, K] bias or adds them into [batch, heads, Q, K] logits (ops/expand.hpp). Fused
// attention reads the same rows (attention_distance_rows).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include "ops/expand.hpp"
#include "ops/op_storage.hpp"
#include "params/distance_window.hpp"
#include "relpos/buffer.hpp"
#include "relpos/dtype.hpp"
#include "relpos/recorder.hpp"
#include "ops/planner.hpp"
#include "relpos_contract/distance_row.h"
#include "relpos_push/loop_bound.h"
#include "vk/access.hpp"
#include "vk/dispatch.hpp"

namespace relpos::detail {

// Heads one invocation of a row shader writes (the skeleton's loop): half the loop bound, leaving
// the other half to the family's own loops (T5's bisection). More heads take further dispatches.
inline constexpr std::uint32_t kRowHeadsPerInvocation = RELPOS_MAX_LOOP_ITERATIONS / 2;
inline constexpr std::uint32_t kRowGroup = 64;

// Compiles a row shader's pipeline (plans, before their first step).
void prepare_row_pipeline(Context& ctx, ShaderId shader);

// Records a family's row shader over the window into `rows` ([out_heads, Q + K - 1] 32-bit
// values), ending with the barrier that makes them readable. `pc` is the family's push block: the
// kit fills its leading RELPOS_DISTANCE_ROW_FIELDS. `params` is binding PARAMS, `extra` (if any)
// CONSTANTS (relpos_contract/distance_row.h). Descriptor sets come from `sets` (a plan's) or the
// recording's pools.
template <class Push>
void record_distance_rows_into(Recorder& r, const DistanceWindow& w, ShaderId shader, Push pc, BufferSpan params,
                               const BufferSpan* extra, std::uint32_t out_heads, const Buffer& rows, DescriptorSource* sets = nullptr) {
  const std::uint32_t row_len = static_cast<std::uint32_t>(w.row_len());
  pc.row_len = row_len;
  pc.rp_first = static_cast<std::int32_t>(w.rp_first());
  pc.causal = w.causal ? 1 : 0;
  for (std::uint32_t h0 = 0; h0 < out_heads; h0 += kRowHeadsPerInvocation) {
    pc.first_head = h0;
    pc.head_count = std::min(kRowHeadsPerInvocation, out_heads - h0);
    for_each_group_range(r.context().limits(), div_up(row_len, kRowGroup), [&](std::uint64_t first, std::uint32_t groups) {
      pc.first = static_cast<std::uint32_t>(first * kRowGroup);
      const contract::WorkgroupSpec spec{.WG_X = kRowGroup};
      if (extra) dispatch(r, sets, shader, spec, contract::DistanceRowConstantsBindings{.PARAMS = params, .ROWS = {&rows}, .CONSTANTS = *extra}, pc, groups);
      else dispatch(r, sets, shader, spec, contract::DistanceRowBindings{.PARAMS = params, .ROWS = {&rows}}, pc, groups);
    });
  }
  barrier(r);
}

// The same into a fresh scratch buffer, which it returns. out_heads 0: w.heads.
template <class Push>
const Buffer& record_distance_rows(Recorder& r, const DistanceWindow& w, ShaderId shader, Push pc, BufferSpan params,
                                   const BufferSpan* extra = nullptr, std::uint32_t out_heads = 0) {
  if (out_heads == 0) out_heads = w.heads;
  Buffer& rows = scratch(r, w.row_len() * out_heads * 4, MemoryUse::Device);
  record_distance_rows_into(r, w, shader, pc, params, extra, out_heads, rows);
  return rows;
}

// The expansion's shape for a window: [heads, Q, K] written, or [batch, heads, Q, K] added into.
inline ExpandShape expand_shape(const DistanceWindow& w, ExpandMode mode) {
  const bool add = mode == ExpandMode::AddF32 || mode == ExpandMode::AddF16;
  return {w.queries, w.keys, w.heads, std::uint64_t{add ? w.batch : 1u} * w.heads * w.queries};
}

// A per-distance family's rows, made once for an envelope of windows (its buffers from a plan's
// storage or the recording's): what the kit's ops, BiasPlan and fused attention record.
class DistanceRows {
 public:
  virtual ~DistanceRows() = default;
  // The rows [w.heads, w.row_len()] of window w into `rows` (-inf for rp > 0 where w.causal), from
  // the family's parameters in `params` (binding 0 of its row shader); ends with the barrier that
  // makes them readable. Descriptor sets from `sets` (a plan's) or the recording's pools.
  virtual void record(Recorder& r, const DistanceWindow& w, const Buffer& params, const Buffer& rows, DescriptorSource* sets) = 0;
  // The row shader it dispatches (once a record), for a plan to reserve its descriptor set.
  virtual ShaderId shader() const = 0;
};

// A row shader on the kit's skeleton: `push` gives the family's push block for a window (the kit
// fills its leading fields); `extra`, if any, is bound at CONSTANTS (the family's constants).
template <class Push>
class ShaderRows final : public DistanceRows {
 public:
  ShaderRows(Context& ctx, ShaderId shader, std::function<Push(const DistanceWindow&)> push, const Buffer* extra = nullptr)
      : shader_(shader), push_(std::move(push)), extra_{extra} {
    prepare_row_pipeline(ctx, shader);
  }
  void record(Recorder& r, const DistanceWindow& w, const Buffer& params, const Buffer& rows, DescriptorSource* sets) override {
    record_distance_rows_into(r, w, shader_, push_(w), {&params}, extra_.buffer ? &extra_ : nullptr, w.heads, rows, sets);
  }
  ShaderId shader() const override { return shader_; }

 private:
  ShaderId shader_;
  std::function<Push(const DistanceWindow&)> push_;
  BufferSpan extra_;
};

// A family's rows with its parameters on the device, for one envelope. `params_name` names them in
// messages: an application's buffer (T5's table) must not share bytes with the output.
struct DistanceSource {
  std::unique_ptr<DistanceRows> rows;
  const Buffer* params = nullptr;
  const char* params_name = "params buffer";
};
// Makes a family's source with buffers from `storage` (the free functions' recording, a plan's).
using SourceMaker = std::function<DistanceSource(OpStorage& storage)>;

// Records the rows of one operation into scratch and returns them.
using RowsRecorder = std::function<const Buffer&(Recorder&)>;
// The rows of window w from the source `make` gives (the free functions).
RowsRecorder source_rows(const DistanceWindow& w, SourceMaker make);

// Checks `out` first, and that it shares no byte with `input`, the application's buffer the rows
// are made from (T5's table, Fourier's rotation; none: null): out's writes would change what the
// next call reads. Then, as one operation, the rows and their expansion: write (mode Copy32 or
// WriteF16) [heads, Q, K] or add (AddF32, AddF16) into [batch, heads, Q, K].
void expand_distance_bias(Recorder& r, const DistanceWindow& w, const Buffer& out, ExpandMode mode, const RowsRecorder& rows,
                          BufferRole input = {nullptr, ""});
// The bias [heads, Q, K] of dtype F32 or F16.
void distance_bias(Recorder& r, const DistanceWindow& w, const Buffer& out, DType dtype, const RowsRecorder& rows,
                   BufferRole input = {nullptr, ""});
// logits [batch, heads, Q, K] of dtype F32 or F16 += the bias.
void distance_bias_add(Recorder& r, const DistanceWindow& w, const Buffer& logits, DType dtype, const RowsRecorder& rows,
                       BufferRole input = {nullptr, ""});
// The name of the expansion's output in messages.
inline const char* expanded_name(ExpandMode mode) {
  return mode == ExpandMode::AddF32 || mode == ExpandMode::AddF16 ? "logits buffer" : "out buffer";
}

}  // namespace relpos::detail
