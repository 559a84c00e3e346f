// Every embedded shader against the contract the host fills (shaders/include/relpos_contract/,
// src/shaders/contracts.cpp), read from its SPIR-V: each declared specialisation constant under its
// id, name, type and default; the workgroup size from the declared size constants; no constant
// that is not declared; and exactly the declared bindings, in descriptor set 0. No GPU needed.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "relpos_contract/attention.h"
#include "relpos_contract/distance_row.h"
#include "relpos_contract/rope.h"
#include "relpos_contract/shaw.h"
#include "shaders/contracts.hpp"
#include "shaders/embedded.hpp"
#include "support/spirv_reflection.hpp"

using namespace relpos::detail;
using relpos::contract::SpecConstant;
using relpos::contract::SpecType;
using relpos::test::reflect_spirv;
using relpos::test::SpirvInterface;
using relpos::test::SpirvSpecConstant;

namespace {

SpirvInterface module_of(ShaderId shader) {
  const EmbeddedShader& s = embedded_shader(shader);
  return reflect_spirv({s.words, s.word_count});
}

// How the module departs from the contract, one line each (none: they agree).
std::vector<std::string> mismatches(const ShaderContract& c, const SpirvInterface& m) {
  std::vector<std::string> out;
  const char* axes[] = {"x", "y"};
  std::set<std::uint32_t> declared_ids;
  for (const SpecConstant& d : c.spec) {
    const std::string what = "constant " + std::to_string(d.id) + " " + std::string(d.name);
    declared_ids.insert(d.id);
    if (d.type == SpecType::SizeX || d.type == SpecType::SizeY) {
      const int a = d.type == SpecType::SizeX ? 0 : 1;
      if (m.workgroup_ids[a] != d.id) out.push_back(what + ": the module's workgroup " + axes[a] + " size is not constant_id " + std::to_string(d.id));
      else if (m.workgroup[a] != d.value) out.push_back(what + ": default " + std::to_string(m.workgroup[a]) + " in the module");
      continue;
    }
    bool found = false;
    for (const SpirvSpecConstant& k : m.constants) {
      if (k.spec_id != d.id) continue;
      bool named = false;
      for (const std::string& n : k.names) named = named || n == d.name;
      if (!named) continue;
      found = true;
      const auto want = d.type == SpecType::Bool ? SpirvSpecConstant::Type::Bool : SpirvSpecConstant::Type::Uint32;
      if (k.type != want) out.push_back(what + ": another type in the module");
      if (k.value != d.value) out.push_back(what + ": default " + std::to_string(k.value) + " in the module");
    }
    if (!found) out.push_back(what + ": no such constant in the module");
  }
  for (const SpirvSpecConstant& k : m.constants)
    if (!declared_ids.count(k.spec_id)) out.push_back("constant_id " + std::to_string(k.spec_id) + " of the module is not declared");
  for (int a = 0; a < 2; ++a) {
    bool declared = false;
    for (const SpecConstant& d : c.spec) declared = declared || d.type == (a == 0 ? SpecType::SizeX : SpecType::SizeY);
    if (!declared && m.workgroup_ids[a]) out.push_back(std::string("the module's workgroup ") + axes[a] + " size is a constant the contract does not declare");
  }
  if (m.workgroup_ids[2]) out.push_back("the module's workgroup z size is a constant");
  std::set<std::pair<std::uint32_t, std::uint32_t>> slots;
  for (const relpos::contract::Binding& b : c.bindings) slots.emplace(0, b.slot);
  if (slots != m.bindings) {
    std::string have;
    for (const auto& [set, binding] : m.bindings) have += " " + std::to_string(set) + ":" + std::to_string(binding);
    out.push_back(std::to_string(c.bindings.size()) + " bindings declared; the module binds (set:binding)" + have);
  }
  return out;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += "\n  " + l;
  return s;
}

TEST(ShaderContracts, EveryShaderFollowsItsContract) {
  // A shader without a contract: shader_contract() throws, naming it.
  for (std::size_t i = 0; i < embedded_shaders().size(); ++i) {
    const ShaderId shader = static_cast<ShaderId>(i);
    const std::string name(embedded_shader(shader).name);
    const SpirvInterface m = module_of(shader);
    EXPECT_FALSE(m.bindings.empty()) << name;
    const std::vector<std::string> wrong = mismatches(shader_contract(shader), m);
    EXPECT_TRUE(wrong.empty()) << name << ":" << joined(wrong);
  }
}

// The check above finds each kind of departure: the same modules against contracts changed by one
// thing at a time.
TEST(ShaderContracts, TheCheckFindsEveryKindOfMismatch) {
  const SpirvInterface tiled = module_of(ShaderId::attention_tiled);
  const auto declared = relpos::contract::AttentionTiledSpec::declared;
  const auto bindings = relpos::contract::AttentionBindings::declared;
  ASSERT_TRUE(mismatches({declared, bindings}, tiled).empty());

  auto with = [&](auto change) {
    std::vector<SpecConstant> spec(declared.begin(), declared.end());
    std::vector<relpos::contract::Binding> slots(bindings.begin(), bindings.end());
    change(spec, slots);
    return mismatches({spec, slots}, tiled);
  };
  using Spec = std::vector<SpecConstant>;
  using Slots = std::vector<relpos::contract::Binding>;
  // The name the SPIR-V also carries for BIAS_MODE in older kernels (`const uint mode = BIAS_MODE`).
  EXPECT_FALSE(with([](Spec& s, Slots&) { s[6].name = "mode"; }).empty());
  EXPECT_FALSE(with([](Spec& s, Slots&) { std::swap(s[6].id, s[7].id); }).empty());           // ids swapped
  EXPECT_FALSE(with([](Spec& s, Slots&) { s[3].type = SpecType::Bool; }).empty());            // IN_HALF as a bool
  EXPECT_FALSE(with([](Spec& s, Slots&) { s[2].value = 16; }).empty());                       // BC's default
  EXPECT_FALSE(with([](Spec& s, Slots&) { s.pop_back(); }).empty());                          // the last (CAUSAL) undeclared
  EXPECT_FALSE(with([](Spec& s, Slots&) { s.push_back({10, "EXTRA", SpecType::Uint, 0}); }).empty());
  EXPECT_FALSE(with([](Spec& s, Slots&) { s[0].type = SpecType::SizeY; }).empty());           // the wrong axis
  EXPECT_FALSE(with([](Spec& s, Slots&) { s[0].type = SpecType::Uint; }).empty());            // a workgroup size not declared
  EXPECT_FALSE(with([](Spec&, Slots& b) { b.pop_back(); }).empty());                          // WORK missing
  EXPECT_FALSE(with([](Spec&, Slots& b) { b.push_back({12, "EXTRA"}); }).empty());
  // A contract of another kernel.
  EXPECT_FALSE(mismatches(shader_contract(ShaderId::attention_fused), tiled).empty());
  EXPECT_FALSE(mismatches({relpos::contract::WorkgroupSpec::declared, relpos::contract::DistanceRowBindings::declared},
                          module_of(ShaderId::t5_distance_row))
                   .empty());
}

// The host fills constants and bindings by name: a struct of another contract, or a binding left
// empty, is refused before anything is recorded.
TEST(ShaderContracts, DispatchesFollowTheShadersContract) {
  const SpecValues tiled = relpos::contract::AttentionTiledSpec{};
  EXPECT_NO_THROW(check_contract(ShaderId::attention_tiled_paged, tiled));
  EXPECT_THROW(check_contract(ShaderId::attention_fused, tiled), relpos::Error);
  EXPECT_THROW(check_contract(ShaderId::attention_merge, SpecValues{}), relpos::Error);
  relpos::contract::DistanceRowBindings rows{};
  EXPECT_THROW(check_contract(ShaderId::alibi_distance_row, rows), relpos::Error);  // no buffers given
  rows.PARAMS.buffer = rows.ROWS.buffer = reinterpret_cast<const relpos::Buffer*>(&rows);  // never dereferenced
  EXPECT_NO_THROW(check_contract(ShaderId::alibi_distance_row, rows));
  EXPECT_THROW(check_contract(ShaderId::t5_distance_row, rows), relpos::Error);  // t5 takes CONSTANTS too
  // Values in constant_id order, bools as 0 or 1.
  const relpos::contract::ShawGatherAddSpec gather{.WG_X = 32, .VEC4 = true, .UNROLL = 2, .ADD = false, .BAND = true, .ROWS = 8};
  const std::array<std::uint32_t, 6> want{32, 1, 2, 0, 1, 8};
  EXPECT_EQ(gather.values(), want);
  EXPECT_EQ(workgroup_size(ShaderId::rope, relpos::contract::RopeSpec{.WG_X = 16, .WG_Y = 4}.values()), (std::array<std::uint32_t, 3>{16, 4, 1}));
}

}  // namespace
