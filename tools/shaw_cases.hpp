#pragma once
// The Shaw family's `relpos check`, `relpos bench` and `relpos fuzz` cases (tools/op_shaw_cases.cpp).
#include "registry.hpp"

namespace relpos::tool {

void register_shaw_checks(Registry& reg);
void register_shaw_benches(Registry& reg);
void register_shaw_fuzz(Registry& reg);  // families "shaw" and "unfused-attention"

}  // namespace relpos::tool
