#pragma once
// Fused attention for hot loops (decoding): a plan built once for the largest step it will run
// holds the pipelines, scratch buffers and descriptor sets of the op, so that recording a step
// with a new key count, query count, query offset or buffers creates no Vulkan object.
#include <cstdint>
#include <memory>

#include "relpos/attention.hpp"

namespace relpos {

class Context;

// What changes from one step to the next.
struct AttentionStep {
  std::uint32_t queries = 1;       // 1 ... envelope.queries
  std::uint32_t keys = 0;          // envelope.memory_prefix ... envelope.keys (and >= 1); paged: 0 (or envelope.keys)
  std::int64_t query_offset = 0;   // the step's AttentionParams::query_offset; paged: 0
  // Packed queries (a packed envelope): the step's tokens, 1 ... envelope.total_queries; the
  // step's queries bound the longest sequence's, as AttentionParams::queries does.
  std::uint32_t total_queries = 0;
};

class AttentionPlan {
 public:
  // `envelope` is the largest step: its queries and keys are the most any step takes; batch, heads,
  // kv_heads, head_dim, dtype, scale, causal, memory_prefix, bias (with t5 or
  // max_relative_position) and key_splits hold for every step (envelope.query_offset is ignored).
  // Compiles every pipeline a step within it can use and makes the scratch buffers for the
  // largest step. Throws InvalidArgument when the envelope is invalid (AttentionParams::validate)
  // or when a buffer a step binds would not fit one storage buffer binding of the device (the
  // plan binds whole buffers; attention() splits such shapes).
  AttentionPlan(Context& ctx, const AttentionParams& envelope);
  ~AttentionPlan();
  AttentionPlan(AttentionPlan&&) noexcept;
  AttentionPlan& operator=(AttentionPlan&&) noexcept;
  AttentionPlan(const AttentionPlan&) = delete;
  AttentionPlan& operator=(const AttentionPlan&) = delete;

  const AttentionParams& envelope() const;
  // The parameters of a step: the envelope with the step's queries, keys and query_offset.
  AttentionParams step_params(const AttentionStep& step) const;

  // Records one step: the result attention() gives for step_params(step) and the same inputs (k
  // and v cut to the step's keys, q, out and lse to its rows: attention() takes every buffer at
  // exactly its call's size, where a step's may be larger), bit for bit. Every bias mode is planned. Checks
  // the step against the envelope (InvalidArgument naming the parameter and the envelope's limit)
  // and the buffers, then records with no new buffer, memory, descriptor pool or set, event or
  // pipeline after the first step (but for a step recorded while every earlier one is pending).
  // Buffers, for the step's Q and K:
  // - q, out: [batch, heads, Q, head_dim] of dtype; lse (optional) float32 [batch, heads, Q];
  //   they may be larger (the step uses their beginning).
  // - k, v: a KV cache, [batch, kv_heads, envelope.keys, head_dim] of dtype; the step reads the
  //   first K keys of each (batch, kv head). A paged envelope (envelope.paged): the paged caches,
  //   block_table and cache_lengths as attention() takes them; every step's keys are the
  //   envelope's (max_blocks * block_size) and its query_offset 0, only the queries vary: a step
  //   is AttentionStep{.queries = Q}, the plan filling in the rest (keys = envelope.keys is
  //   accepted too). A packed envelope (envelope.total_queries): q, out [step.total_queries,
  //   heads, head_dim] and query_lengths as attention() takes them.
  // - bias: T5: the [num_buckets, heads] table (the plan computes the per-distance row itself);
  //   distance rows [heads, Q + K - 1], ALiBi slopes [heads], dense [heads, Q, K] as attention()
  //   takes them; rel_keys and rel_values for Shaw; key_lengths as attention() takes them.
  // Steps recorded into one command buffer, or submitted one after another on one queue, run in
  // order: the plan's scratch buffers are shared by its steps, and each step's per-step host data
  // (T5 thresholds) travels inside the command buffer. Descriptor sets: each step that may still
  // be pending holds a set of its own; the plan knows a step has executed once the command buffer
  // passed the event the step ends with (a Recorder's own submit_and_wait, or the application's
  // submission), and only then writes its sets again. A step recorded while every earlier one is
  // pending takes new sets (after the first few, from a new descriptor pool).
  // One thread at a time; the plan must outlive the execution of the command buffers it recorded
  // into unless it is destroyed after they finished (its resources then go at once) -- a plan
  // destroyed earlier hands them to the Context, which frees them when the last step's event is
  // set.
  void record(Recorder& r, const AttentionStep& step, const AttentionBuffers& b);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace relpos
