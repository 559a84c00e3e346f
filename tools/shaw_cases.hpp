#pragma once
// The Shaw family's `relpos check` and `relpos bench` cases (tools/op_shaw_cases.cpp).
#include "registry.hpp"

namespace relpos::tool {

void register_shaw_checks(Registry& reg);
void register_shaw_benches(Registry& reg);

}  // namespace relpos::tool
