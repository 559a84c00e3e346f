#pragma once
// BiasPlan's state and its constructor for the families with host parameters, which each family's
// source instantiates for its Params (ops/alibi.cpp, ...) next to the function that makes its rows:
//   relpos::detail::DistanceSource distance_source(Context&, const Params&, detail::OpStorage&);
#include "ops/distance_bias.hpp"
#include "ops/plan_storage.hpp"
#include "relpos/bias_plan.hpp"
#include "relpos/context.hpp"

namespace relpos {

struct BiasPlan::State {
  Context* ctx = nullptr;
  detail::DistanceWindow env;
  detail::ExpandMode mode{};
  detail::PlanStorage storage;
  const Buffer* rows = nullptr;
  const Buffer* shifted = nullptr;
  detail::DistanceSource source;  // the family's rows and parameters

  State(Context& c, const detail::DistanceWindow& envelope, DType dtype, bool add, const detail::SourceMaker& make);
};

template <class Params>
BiasPlan::BiasPlan(Context& ctx, const Params& envelope, DType dtype, bool add) {
  envelope.validate();
  state_ = std::make_unique<State>(ctx, detail::distance_window(envelope), dtype, add,
                                   [&](detail::OpStorage& storage) { return distance_source(ctx, envelope, storage); });
}

}  // namespace relpos
