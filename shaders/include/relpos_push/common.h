// Push-constant blocks are declared once, in headers that both GLSL and C++ include.
// Members are 4-byte scalars only (uint, int, float), so the std430 layout of the GLSL block and
// the C++ struct agree without padding rules.
#ifndef RELPOS_PUSH_COMMON_H
#define RELPOS_PUSH_COMMON_H

#ifdef __cplusplus
#include <cstdint>
#define RELPOS_PUSH_BEGIN(Name) \
  namespace relpos::push {      \
  using uint = std::uint32_t;   \
  struct Name
#define RELPOS_PUSH_END(Name)                                                      \
  ;                                                                                \
  static_assert(sizeof(Name) <= 128, "push constants are limited to 128 bytes"); \
  }
#else
#define RELPOS_PUSH_BEGIN(Name) layout(push_constant) uniform Name
#define RELPOS_PUSH_END(Name) pc;
#endif

#endif
