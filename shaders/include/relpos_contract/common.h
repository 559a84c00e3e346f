// A kernel's specialisation constants and storage-buffer bindings, declared once by name in
// headers that both GLSL and C++ include (push constants: relpos_push/).
//
// Specialisation constants: a list macro RELPOS_SPEC_<KERNEL>(X) calls X(id, NAME, type, value)
// once per constant, ids 0, 1, ... in order. type is
//   uint, bool  layout(constant_id = id) const <type> NAME = value;
//   size_x      the workgroup's x size: layout(local_size_x = value, local_size_x_id = id), and
//               const uint NAME = gl_WorkGroupSize.x;
//   size_y      its y size, alike.
// Bindings (descriptor set 0, storage buffers): a list RELPOS_BINDINGS_<KERNEL>(X) calls
// X(slot, NAME) once per binding, slots 0, 1, ... in order.
// A shader declares its lists with RELPOS_DECLARE_SPEC(list) and RELPOS_DECLARE_BINDINGS(list),
// which gives each binding a constant BINDING_<NAME> for its layout(binding = ...) qualifiers. In
// C++, RELPOS_SPEC_STRUCT and RELPOS_BINDINGS_STRUCT make a struct of a list in
// relpos::contract, with a field per name: the host fills the constants and the bindings by name.
// src/shaders/contracts.cpp says which lists each shader follows; tests/test_shader_contracts.cpp
// checks every one against the SPIR-V.
// Comments inside a list are /* */: a // comment would swallow the line continuation.
#ifndef RELPOS_CONTRACT_COMMON_H
#define RELPOS_CONTRACT_COMMON_H

#ifdef __cplusplus
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace relpos {
class Buffer;
}

namespace relpos::detail {
// A range of a buffer bound to one binding. bytes == 0: to the end of the buffer.
struct BufferSpan {
  const Buffer* buffer = nullptr;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};
}  // namespace relpos::detail

namespace relpos::contract {

enum class SpecType : std::uint8_t { Uint, Bool, SizeX, SizeY };
struct SpecConstant {
  std::uint32_t id;
  std::string_view name;
  SpecType type;
  std::uint32_t value;  // the default (a bool as 0 or 1)
};
struct Binding {
  std::uint32_t slot;
  std::string_view name;
};

// Ids (slots) 0, 1, ... in order: values() and spans() are then indexed by them.
template <class Decl, std::size_t N>
constexpr bool numbered_in_order(const std::array<Decl, N>& declared, std::uint32_t Decl::*number) {
  for (std::size_t i = 0; i < N; ++i)
    if (declared[i].*number != i) return false;
  return true;
}

}  // namespace relpos::contract

#define RELPOS_SPEC_CPP_TYPE_uint std::uint32_t
#define RELPOS_SPEC_CPP_TYPE_bool bool
#define RELPOS_SPEC_CPP_TYPE_size_x std::uint32_t
#define RELPOS_SPEC_CPP_TYPE_size_y std::uint32_t
#define RELPOS_SPEC_KIND_uint ::relpos::contract::SpecType::Uint
#define RELPOS_SPEC_KIND_bool ::relpos::contract::SpecType::Bool
#define RELPOS_SPEC_KIND_size_x ::relpos::contract::SpecType::SizeX
#define RELPOS_SPEC_KIND_size_y ::relpos::contract::SpecType::SizeY
#define RELPOS_SPEC_FIELD_(id, NAME, type, value) RELPOS_SPEC_CPP_TYPE_##type NAME = value;
#define RELPOS_SPEC_DECLARED_(id, NAME, type, value) \
  ::relpos::contract::SpecConstant{id, #NAME, RELPOS_SPEC_KIND_##type, static_cast<std::uint32_t>(value)},
#define RELPOS_SPEC_ITEM_(id, NAME, type, value) static_cast<std::uint32_t>(NAME),
#define RELPOS_SPEC_COUNT_(id, NAME, type, value) +1
#define RELPOS_BINDING_FIELD_(slot, NAME) ::relpos::detail::BufferSpan NAME;
#define RELPOS_BINDING_DECLARED_(slot, NAME) ::relpos::contract::Binding{slot, #NAME},
#define RELPOS_BINDING_ITEM_(slot, NAME) NAME,
#define RELPOS_BINDING_COUNT_(slot, NAME) +1

// struct Name { a field per name; count; declared: the list; items(): the fields in list order }.
#define RELPOS_CONTRACT_STRUCT_(Name, LIST, KIND, Decl, number, Item, items)                           \
  namespace relpos::contract {                                                                         \
  struct Name {                                                                                        \
    LIST(RELPOS_##KIND##_FIELD_)                                                                       \
    static constexpr std::size_t count = 0 LIST(RELPOS_##KIND##_COUNT_);                               \
    static constexpr std::array<Decl, count> declared{{LIST(RELPOS_##KIND##_DECLARED_)}};              \
    std::array<Item, count> items() const { return {LIST(RELPOS_##KIND##_ITEM_)}; }                    \
  };                                                                                                   \
  static_assert(numbered_in_order(Name::declared, &Decl::number), #LIST ": " #number "s must be 0, 1, ... in order"); \
  }
// struct Name { <type> NAME = value; ... values(): in constant_id order }.
#define RELPOS_SPEC_STRUCT(Name, LIST) RELPOS_CONTRACT_STRUCT_(Name, LIST, SPEC, SpecConstant, id, std::uint32_t, values)
// struct Name { BufferSpan NAME; ... spans(): in slot order }.
#define RELPOS_BINDINGS_STRUCT(Name, LIST) RELPOS_CONTRACT_STRUCT_(Name, LIST, BINDING, Binding, slot, ::relpos::detail::BufferSpan, spans)

#else  // GLSL

#define RELPOS_SPEC_GLSL_uint(id, NAME, value) layout(constant_id = id) const uint NAME = value;
#define RELPOS_SPEC_GLSL_bool(id, NAME, value) layout(constant_id = id) const bool NAME = value;
#define RELPOS_SPEC_GLSL_size_x(id, NAME, value) \
  layout(local_size_x = value, local_size_x_id = id) in; const uint NAME = gl_WorkGroupSize.x;
#define RELPOS_SPEC_GLSL_size_y(id, NAME, value) \
  layout(local_size_y = value, local_size_y_id = id) in; const uint NAME = gl_WorkGroupSize.y;
#define RELPOS_SPEC_GLSL_(id, NAME, type, value) RELPOS_SPEC_GLSL_##type(id, NAME, value)
#define RELPOS_DECLARE_SPEC(LIST) LIST(RELPOS_SPEC_GLSL_)

#define RELPOS_BINDING_GLSL_(slot, NAME) const uint BINDING_##NAME = slot;
#define RELPOS_DECLARE_BINDINGS(LIST) LIST(RELPOS_BINDING_GLSL_)

#endif

// Kernels whose only constant is their workgroup size.
#define RELPOS_SPEC_WORKGROUP(X) X(0, WG_X, size_x, 64u)

#ifdef __cplusplus
RELPOS_SPEC_STRUCT(WorkgroupSpec, RELPOS_SPEC_WORKGROUP)
#endif

#endif
