#pragma once
// What a SPIR-V module says of its interface with the host: its specialisation constants, its
// workgroup size and its descriptor bindings (tests/test_shader_contracts.cpp checks each embedded
// shader's contract against it).
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace relpos::test {

// One result decorated SpecId: a scalar OpSpecConstant* (or a workgroup size's component).
struct SpirvSpecConstant {
  std::uint32_t spec_id = 0;
  std::vector<std::string> names;  // OpName: none, or several where a const aliases it
  enum class Type { Bool, Uint32, Int32, Other } type = Type::Other;
  std::uint32_t value = 0;  // the default (a bool as 0 or 1)
};

struct SpirvInterface {
  std::vector<SpirvSpecConstant> constants;
  // Each workgroup dimension (WorkgroupSize built-in, or the LocalSize execution mode): the SpecId
  // of its constant, if any, and its default size.
  std::array<std::optional<std::uint32_t>, 3> workgroup_ids;
  std::array<std::uint32_t, 3> workgroup{1, 1, 1};
  std::set<std::pair<std::uint32_t, std::uint32_t>> bindings;  // (DescriptorSet, Binding)
};

SpirvInterface reflect_spirv(std::span<const std::uint32_t> words);

}  // namespace relpos::test
