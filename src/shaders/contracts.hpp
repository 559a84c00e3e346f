#pragma once
// Which contract (shaders/include/relpos_contract/) each embedded shader follows, and the
// constants and buffers of one dispatch, filled by name in the contract's structs.
#include <algorithm>
#include <array>
#include <concepts>
#include <cstdint>
#include <span>
#include <type_traits>

#include "relpos_contract/common.h"
#include "shader_id.hpp"

namespace relpos::detail {

// The most storage buffers one shader binds (fused attention): what descriptor pools are sized for.
inline constexpr std::uint32_t kMaxBindings = 12;
inline constexpr std::uint32_t kMaxSpecConstants = 16;

// A shader's specialisation constants (in constant_id order) and bindings (in slot order).
struct ShaderContract {
  std::span<const contract::SpecConstant> spec;
  std::span<const contract::Binding> bindings;
};
ShaderContract shader_contract(ShaderId shader);

// The workgroup size of `shader` with the constants `spec` (its size_x and size_y constants).
std::array<std::uint32_t, 3> workgroup_size(ShaderId shader, std::span<const std::uint32_t> spec);

// The structs RELPOS_SPEC_STRUCT and RELPOS_BINDINGS_STRUCT make.
template <class T, class Declared>
concept ContractStruct = std::same_as<typename std::remove_cvref_t<decltype(T::declared)>::value_type, Declared>;

// A shader's specialisation constants, filled by name in its contract's struct (e.g.
// contract::AttentionTiledSpec), as values in constant_id order with the list they follow.
class SpecValues {
 public:
  SpecValues() = default;  // follows no contract
  template <ContractStruct<contract::SpecConstant> Spec>
  SpecValues(const Spec& spec) : declared_(Spec::declared) {  // NOLINT(google-explicit-constructor): any contract's struct
    static_assert(Spec::count <= kMaxSpecConstants);
    const auto v = spec.values();
    std::copy(v.begin(), v.end(), values_.begin());
  }
  std::span<const std::uint32_t> values() const { return {values_.data(), declared_.size()}; }
  std::span<const contract::SpecConstant> declared() const { return declared_; }

 private:
  std::span<const contract::SpecConstant> declared_;
  std::array<std::uint32_t, kMaxSpecConstants> values_{};
};

// A dispatch's buffers, filled by name in its shader's contract struct (e.g.
// contract::AttentionBindings), in slot order with the list they follow.
class BindingSpans {
 public:
  template <ContractStruct<contract::Binding> Bindings>
  BindingSpans(const Bindings& b) : declared_(Bindings::declared) {  // NOLINT(google-explicit-constructor)
    static_assert(Bindings::count <= kMaxBindings, "the runtime binds kMaxBindings buffers at most");
    const auto s = b.spans();
    std::copy(s.begin(), s.end(), spans_.begin());
  }
  std::span<const BufferSpan> spans() const { return {spans_.data(), declared_.size()}; }
  std::span<const contract::Binding> declared() const { return declared_; }

 private:
  std::span<const contract::Binding> declared_;
  std::array<BufferSpan, kMaxBindings> spans_{};
};

// Internal errors unless `spec` (`bindings`) follow `shader`'s contract, every binding given.
void check_contract(ShaderId shader, const SpecValues& spec);
void check_contract(ShaderId shader, const BindingSpans& bindings);

}  // namespace relpos::detail
