// KvAppendPlan (relpos/kv_cache.hpp): kv_append()'s recording with the plan's constants (uploaded
// once: they follow from the params alone), its stand-in for q and its descriptor sets.
#include "ops/kv_append_record.hpp"
#include "ops/plan_storage.hpp"
#include "params/checks.hpp"
#include "vk/access.hpp"
#include "relpos/context.hpp"
#include "relpos/kv_cache.hpp"
#include "relpos/recorder.hpp"
#include "vk/access.hpp"

namespace relpos {

struct KvAppendPlan::State {
  std::shared_ptr<detail::Device> dev;  // the Context's (a moved Context takes it along)
  KvAppendParams params;
  detail::KvAppendConstants constants;
  std::unique_ptr<detail::PlanStorage> storage;
  const Buffer* constants_buffer = nullptr;
  const Buffer* no_q = nullptr;
};

KvAppendPlan::KvAppendPlan(Context& ctx, const KvAppendParams& params) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.dev = detail::device_of(ctx);
  s.params = params;
  s.params.validate();
  s.constants = detail::kv_append_constants(s.params);
  s.storage = std::make_unique<detail::PlanStorage>(ctx);
  s.constants_buffer = &s.storage->upload(std::span<const float>(s.constants.values), "kv_append constants");
  s.no_q = &s.storage->make(16, "q stand-in");
  Recorder r(ctx);
  detail::record_kv_append(r, s.params, s.constants, {}, {nullptr, nullptr, nullptr, true});
}

KvAppendPlan::~KvAppendPlan() = default;
KvAppendPlan::KvAppendPlan(KvAppendPlan&&) noexcept = default;
KvAppendPlan& KvAppendPlan::operator=(KvAppendPlan&&) noexcept = default;

const KvAppendParams& KvAppendPlan::params() const { return detail::live_state(state_, "KvAppendPlan").params; }

void KvAppendPlan::record(Recorder& r, const KvAppendBuffers& b) {
  State& s = detail::live_state(state_, "KvAppendPlan");
  detail::require_plan_recorder(r, s.dev);
  detail::check_kv_append_buffers(r, s.params, b);
  const auto op = detail::begin_op(r);
  detail::DescriptorSource& sets = s.storage->sets().begin_step();
  detail::record_kv_append(r, s.params, s.constants, b, {s.constants_buffer, s.no_q, &sets, false});
  s.storage->sets().end_step(r);
}

}  // namespace relpos
