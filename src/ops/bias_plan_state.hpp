#pragma once
// BiasPlan's state, its constructor for the families with host parameters and their free
// functions' body, which each family's source instantiates for its Params (ops/alibi.cpp, ...) next
// to the function that makes its rows:
//   relpos::detail::DistanceSource distance_source(Context&, const Params&, detail::OpStorage&);
#include "ops/distance_bias.hpp"
#include "ops/plan_storage.hpp"
#include "relpos/bias_plan.hpp"
#include "relpos/context.hpp"
#include "vk/access.hpp"

namespace relpos {

struct BiasPlan::State {
  std::shared_ptr<detail::Device> dev;  // the Context's (a moved Context takes it along)
  detail::DistanceWindow env;
  detail::ExpandMode mode{};
  detail::PlanStorage storage;
  const Buffer* rows = nullptr;
  const Buffer* shifted = nullptr;
  detail::DistanceSource source;  // the family's rows and parameters

  State(Context& c, const detail::DistanceWindow& envelope, DType dtype, bool add, const detail::SourceMaker& make);
};

namespace detail {

// The free functions of a family with host parameters: its rows (its distance_source) into the
// recording's scratch, written as [heads, Q, K] or added into [batch, heads, Q, K].
template <class Params>
void family_bias(Recorder& r, const Params& p, const Buffer& out, DType dtype, bool add) {
  p.validate();
  const DistanceWindow w = distance_window(p);
  const RowsRecorder rows = source_rows(w, [&](OpStorage& s) { return distance_source(r.context(), p, s); });
  add ? distance_bias_add(r, w, out, dtype, rows) : distance_bias(r, w, out, dtype, rows);
}

}  // namespace detail

template <class Params>
BiasPlan::BiasPlan(Context& ctx, const Params& envelope, DType dtype, bool add) {
  envelope.validate();
  state_ = std::make_unique<State>(ctx, detail::distance_window(envelope), dtype, add,
                                   [&](detail::OpStorage& storage) { return distance_source(ctx, envelope, storage); });
}

}  // namespace relpos
