// reflect_spirv(): one pass over the module's instructions, then the results tied together.
#include "support/spirv_reflection.hpp"

namespace relpos::test {

SpirvInterface reflect_spirv(std::span<const std::uint32_t> words) {
  constexpr std::uint32_t kOpName = 5, kOpExecutionMode = 16, kOpTypeBool = 20, kOpTypeInt = 21, kOpConstant = 43,
                          kOpConstantComposite = 44, kOpSpecConstantTrue = 48, kOpSpecConstantFalse = 49, kOpSpecConstant = 50,
                          kOpSpecConstantComposite = 51, kOpDecorate = 71;
  constexpr std::uint32_t kDecorationSpecId = 1, kDecorationBuiltIn = 11, kDecorationBinding = 33, kDecorationDescriptorSet = 34,
                          kBuiltInWorkgroupSize = 25, kModeLocalSize = 17;
  std::map<std::uint32_t, std::vector<std::string>> names;
  std::map<std::uint32_t, std::uint32_t> spec_ids, values, binding_of, set_of;
  std::map<std::uint32_t, SpirvSpecConstant::Type> types;  // type result id -> scalar type
  std::map<std::uint32_t, std::pair<std::uint32_t, std::uint32_t>> spec_values;  // result -> (type id, default)
  std::map<std::uint32_t, std::vector<std::uint32_t>> composites;
  std::uint32_t workgroup_builtin = 0;
  SpirvInterface out;
  for (std::size_t i = 5; i < words.size();) {
    const std::uint32_t count = words[i] >> 16, op = words[i] & 0xffff;
    if (count == 0 || i + count > words.size()) break;
    const std::uint32_t* w = words.data() + i;
    if (op == kOpName && count >= 3) names[w[1]].emplace_back(reinterpret_cast<const char*>(w + 2));
    if (op == kOpDecorate && count >= 4) {
      if (w[2] == kDecorationSpecId) spec_ids[w[1]] = w[3];
      if (w[2] == kDecorationBuiltIn && w[3] == kBuiltInWorkgroupSize) workgroup_builtin = w[1];
      if (w[2] == kDecorationBinding) binding_of[w[1]] = w[3];
      if (w[2] == kDecorationDescriptorSet) set_of[w[1]] = w[3];
    }
    if (op == kOpTypeBool) types[w[1]] = SpirvSpecConstant::Type::Bool;
    if (op == kOpTypeInt && count >= 4 && w[2] == 32)
      types[w[1]] = w[3] ? SpirvSpecConstant::Type::Int32 : SpirvSpecConstant::Type::Uint32;
    if (op == kOpConstant && count >= 4) values[w[2]] = w[3];
    if (op == kOpSpecConstant && count >= 4) spec_values[w[2]] = {w[1], w[3]};
    if (op == kOpSpecConstantTrue || op == kOpSpecConstantFalse) spec_values[w[2]] = {w[1], op == kOpSpecConstantTrue ? 1u : 0u};
    if ((op == kOpConstantComposite || op == kOpSpecConstantComposite) && count >= 6) composites[w[2]] = {w[3], w[4], w[5]};
    if (op == kOpExecutionMode && count >= 6 && w[2] == kModeLocalSize) out.workgroup = {w[3], w[4], w[5]};
    i += count;
  }
  for (const auto& [id, spec_id] : spec_ids) {
    SpirvSpecConstant c;
    c.spec_id = spec_id;
    if (auto n = names.find(id); n != names.end()) c.names = n->second;
    if (auto v = spec_values.find(id); v != spec_values.end()) {
      c.value = v->second.second;
      if (auto t = types.find(v->second.first); t != types.end()) c.type = t->second;
    }
    out.constants.push_back(std::move(c));
  }
  if (auto it = composites.find(workgroup_builtin); it != composites.end())
    for (int a = 0; a < 3; ++a) {
      const std::uint32_t id = it->second[a];
      if (auto s = spec_ids.find(id); s != spec_ids.end()) out.workgroup_ids[a] = s->second;
      out.workgroup[a] = spec_values.count(id) ? spec_values[id].second : values.count(id) ? values[id] : 1;
    }
  for (const auto& [id, binding] : binding_of) out.bindings.emplace(set_of.count(id) ? set_of[id] : 0, binding);
  return out;
}

}  // namespace relpos::test
