#pragma once
#include <stdexcept>
#include <string>

namespace relpos {

// Every failure the library reports is a relpos::Error (or a subclass).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A parameter, shape or buffer that the operation cannot accept. Thrown before anything is
// recorded or dispatched; the message names the parameter and the limit it broke.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A Vulkan call failed, or the device lacks something the library needs.
class VulkanError : public Error {
 public:
  using Error::Error;
};

}  // namespace relpos
