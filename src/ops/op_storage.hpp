#pragma once
// Where an operation's own buffers come from: a plan's, made once for its largest step and kept
// (PlanStorage), or a recording's scratch, kept until the recording has executed
// (RecordingStorage). One recording path serves a free function and its plan through it.
#include <cstdint>
#include <span>
#include <string>

#include "relpos/buffer.hpp"
#include "relpos/recorder.hpp"

namespace relpos::detail {

class OpStorage {
 public:
  // A device buffer of at least `bytes`; `what` names it in errors.
  virtual const Buffer& make(std::uint64_t bytes, const std::string& what) = 0;
  // A buffer holding `bytes` bytes of `data`, readable by the op's dispatches.
  virtual const Buffer& upload_bytes(const void* data, std::uint64_t bytes, const std::string& what) = 0;
  template <class T>
  const Buffer& upload(std::span<const T> values, const std::string& what = "") {
    return upload_bytes(values.data(), values.size_bytes(), what);
  }

 protected:
  ~OpStorage() = default;
};

class RecordingStorage final : public OpStorage {
 public:
  explicit RecordingStorage(Recorder& r) : r_(r) {}
  const Buffer& make(std::uint64_t bytes, const std::string& what) override;
  const Buffer& upload_bytes(const void* data, std::uint64_t bytes, const std::string& what) override;

 private:
  Recorder& r_;
};

}  // namespace relpos::detail
