// RopePlan (relpos/rope.hpp): rope()'s recording with the plan's frequency buffer (updated in the
// command buffer each step) and descriptor sets.
#include <string>

#include "ops/plan_storage.hpp"
#include "ops/rope_record.hpp"
#include "params/checks.hpp"
#include "relpos/context.hpp"
#include "relpos/rope.hpp"
#include "vk/access.hpp"

namespace relpos {

using detail::require;

struct RopePlan::State {
  std::shared_ptr<detail::Device> dev;  // the Context's (a moved Context takes it along)
  RopeParams env;
  DType dtype = DType::F32;
  bool in_place = true;
  bool positions = false;
  std::unique_ptr<detail::PlanStorage> storage;
  const Buffer* frequencies = nullptr;
};

RopePlan::RopePlan(Context& ctx, const RopeParams& envelope, DType dtype, bool in_place, bool positions)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.dev = detail::device_of(ctx);
  s.env = envelope;
  s.env.position_offset = 0;
  s.env.validate(dtype);  // what every step's record would refuse, refused once here
  s.dtype = dtype;
  s.in_place = in_place;
  s.positions = positions;
  s.storage = std::make_unique<detail::PlanStorage>(ctx);
  // One float per rotated pair: rope_frequencies' table.
  s.frequencies = &s.storage->make(std::uint64_t{s.env.rot_dim() / 2} * 4, "rotary_dim / 2 frequencies");
  // The pipeline does not depend on the step (seq or offset): create it now.
  const Buffer x, out, pos;  // stand-ins: only whether they are given (and distinct) matters here
  Recorder r(ctx);
  detail::record_rope(r, s.env, x, in_place ? nullptr : &out, dtype, positions ? &pos : nullptr, {nullptr, nullptr, true});
}

RopePlan::~RopePlan() = default;
RopePlan::RopePlan(RopePlan&&) noexcept = default;
RopePlan& RopePlan::operator=(RopePlan&&) noexcept = default;

void RopePlan::record(Recorder& r, const RopeStep& step, const Buffer& x, const Buffer* out, const Buffer* positions) {
  State& s = detail::live_state(state_, "RopePlan");
  detail::require_plan_recorder(r, s.dev);
  if (step.seq < 1 || step.seq > s.env.seq)
    require(false, "seq", std::to_string(step.seq),
            "must be in [1, " + std::to_string(s.env.seq) + "] (the plan's envelope: seq = " + std::to_string(s.env.seq) + ")");
  if (s.in_place)
    require(out == nullptr || out == &x, "out", "a buffer other than x", "must be null or x: the plan rotates in place");
  else
    require(out != nullptr && out != &x, "out", out ? "x" : "null",
            "must be a buffer other than x: the plan was built out of place (in_place = false; build one in place to rotate x itself)");
  require((positions != nullptr) == s.positions, "positions", positions ? "a buffer" : "null",
          s.positions ? "is required: the plan reads positions from a buffer" : "must be null: the plan uses position_offset");
  RopeParams p = s.env;
  p.seq = step.seq;
  p.position_offset = step.position_offset;
  p.validate();
  detail::DescriptorSource& sets = s.storage->sets().begin_step();
  detail::record_rope(r, p, x, out, s.dtype, positions, {s.frequencies, &sets, false});
  s.storage->sets().end_step(r);
}

}  // namespace relpos
