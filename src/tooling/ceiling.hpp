#pragma once
// Reference kernels that measure what the device can do, for `relpos bench`: every relpos timing is
// reported beside one of these over the same number of bytes. Not installed (relpos_tooling).
#include <cstdint>

namespace relpos {

class Buffer;
class Recorder;

// Writes `value` over the first `bytes` (a multiple of 16) with one 16-byte store per quad: the
// device's write ceiling.
void fill_u32(Recorder& r, const Buffer& out, std::uint64_t bytes, std::uint32_t value);

// Copies the first `bytes` (a multiple of 16) of src to dst, a 16-byte load and store per quad:
// the device's copy ceiling (it moves 2 * bytes).
void copy_u32(Recorder& r, const Buffer& src, const Buffer& dst, std::uint64_t bytes);

// The same two through transfer commands (vkCmdFillBuffer, vkCmdCopyBuffer). CPU devices run
// them as memset and memcpy, faster than any shader's stores there: the ceiling of the per-distance
// biases' copy path (DistanceExpansion). `bytes` a multiple of 4.
void fill_u32_transfer(Recorder& r, const Buffer& out, std::uint64_t bytes, std::uint32_t value);
void copy_transfer(Recorder& r, const Buffer& src, const Buffer& dst, std::uint64_t bytes);

}  // namespace relpos
