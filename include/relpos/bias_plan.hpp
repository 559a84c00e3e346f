#pragma once
// The per-distance biases (T5, ALiBi, KERPLE, Sandwich) for hot loops: a plan built once for the
// largest step holds the pipelines, the scratch buffers (the rows and their shifted copies), the
// family's parameters on the device and descriptor sets, so that recording a step with new
// queries, keys or offset creates nothing. The free functions (t5_bias, alibi_bias_add, ...) stay
// the simple path; both record the family's rows the same way.
#include <cstdint>
#include <memory>

#include "relpos/dtype.hpp"
#include "relpos/t5.hpp"

namespace relpos {

class Buffer;
class Context;
class Recorder;

// What changes from one step to the next.
struct BiasStep {
  std::uint32_t queries = 1;
  std::uint32_t keys = 1;
  std::int64_t query_offset = 0;
};

class BiasPlan {
 public:
  // `envelope` is the largest step: its queries and keys are the most any step takes; everything
  // else (heads, batch, the family's parameters, causal) holds for every step. `add`: the step adds
  // into logits [batch, heads, Q, K] of `dtype` (t5_bias_add, ...); otherwise it writes the bias
  // [heads, Q, K] (t5_bias, ...). Throws InvalidArgument for an invalid envelope.
  // A family with host parameters: Params is AlibiParams, KerpleParams or SandwichParams.
  template <class Params>
  BiasPlan(Context& ctx, const Params& envelope, DType dtype, bool add);
  // T5, whose table (float32 [num_buckets, heads]) is read by every step: it must outlive them.
  BiasPlan(Context& ctx, const T5Params& envelope, const Buffer& table, DType dtype, bool add);
  ~BiasPlan();
  BiasPlan(BiasPlan&&) noexcept;
  BiasPlan& operator=(BiasPlan&&) noexcept;

  // Records what the free function gives for the envelope with the step's queries, keys and
  // query_offset, into `out` (its first elements: the step's [heads, Q, K] or [batch, heads, Q, K]),
  // bit for bit. Checks the step against the envelope (InvalidArgument naming the parameter and the
  // envelope's limit) and `out`, then records with no new buffer, memory, descriptor pool or
  // pipeline. Steps run in the order they are recorded (they share the plan's scratch); the same
  // rules as AttentionPlan's for command buffers, threads and the plan's lifetime hold.
  void record(Recorder& r, const BiasStep& step, const Buffer& out);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace relpos
