#pragma once
// NumPy .npy files (format 1.0-3.0, little-endian, C order): what the relpos tool reads and writes.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "relpos/dtype.hpp"

namespace relpos {

struct NpyArray {
  std::string descr;                // numpy dtype string, e.g. "<f4"
  std::vector<std::uint64_t> shape;
  std::vector<unsigned char> bytes;  // the raw element data

  std::uint64_t elements() const;
  // The values as float32, converting from float16, float32 or float64; int32 for int arrays
  // (int32, int64 within range). Anything else throws InvalidArgument naming `name`.
  std::vector<float> to_f32(const std::string& name) const;
  std::vector<std::int32_t> to_i32(const std::string& name) const;
};

// Throws InvalidArgument naming the file for anything that is not a valid .npy it can read.
NpyArray read_npy(const std::string& path);

// Writes data (elements of dtype, count = product of shape) as a .npy file.
void write_npy(const std::string& path, DType dtype, std::span<const std::uint64_t> shape, const void* data);
// The same for elements of a numpy type given by its descr: "<f4", "<f2", "<i4", "|u1" (uint8) or
// "<u2" (uint16); InvalidArgument for any other.
void write_npy(const std::string& path, std::string_view descr, std::span<const std::uint64_t> shape, const void* data);

}  // namespace relpos
