#pragma once
// What a ring rank keeps between calls and what its calls share: buffers kept by name, views into
// them, copies in groups, the ranks' agreement on a call's shape, an all-gather over the ring, and
// the ranks' admission of a call, and the guard that tells the other ranks when this one fails.
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "relpos/buffer.hpp"
#include "relpos/recorder.hpp"
#include "relpos/ring.hpp"

namespace relpos {

struct RingRank::State {
  Context* ctx = nullptr;
  RingTransport* transport = nullptr;
  // Each kind of recording has a recorder of its own, so that each keeps the scratch buffers its
  // next recording of the same shapes asks for (a Recorder frees what a recording leaves unused).
  Recorder recorder;  // the ring's steps, sharded attention's partial result
  Recorder setup;     // the ring's first chunk and query pieces, sharded attention's merge

  State(Context& c, RingTransport& t);

  // A buffer of at least `bytes` kept under `name` for later calls (made again only when it is
  // too small or of another memory use).
  Buffer& keep(const std::string& name, std::uint64_t bytes, MemoryUse use);
  // A view of `bytes` at `offset` into `b` (valid until end_call()).
  const Buffer& view(const Buffer& b, std::uint64_t offset, std::uint64_t bytes);
  // Forgets the views of the last call.
  void end_call() { views.clear(); }
  // The failure that stopped this rank's ring (ring_guard): the transport has told the other ranks
  // and may hold a half-done exchange, so no later call can run on it.
  std::string stopped;
  // The call under way was refused by every rank at its admission (ring_admit): nothing moved, the
  // ring runs on.
  bool refused = false;

 private:
  struct Kept {
    Buffer buffer;
    MemoryUse use;
  };
  std::map<std::string, Kept> kept;
  std::list<Buffer> views;
};

namespace detail {

// Every offset a ring places a view at is a multiple of this: Vulkan's largest allowed
// minStorageBufferOffsetAlignment, so that ranks on different devices agree on a chunk's layout.
inline constexpr std::uint64_t kRingAlign = 256;
inline std::uint64_t ring_aligned(std::uint64_t bytes) { return (bytes + kRingAlign - 1) / kRingAlign * kRingAlign; }

// The call's rank count is the transport's.
void ring_require_transport(const RingTransport& t, std::uint32_t ranks);

// A rank's buffer of exactly `bytes` (InvalidArgument naming it and its layout otherwise).
void ring_require_size(const Buffer* b, std::uint64_t bytes, const std::string& name, const std::string& layout);

// vkCmdCopyBuffer with at most 32 regions a command (the validation layer's checks of one command
// grow with the square of its regions; docs/ARCHITECTURE.md, "The per-distance expansion").
void copy_in_groups(Recorder& r, const Buffer& src, const Buffer& dst, const std::vector<VkBufferCopy>& regions);

// The call's settings as named numbers, which every rank compares with every other's before any
// data moves. A field's kind says how a message shows its value (a float's bits as the float, an
// enum by name).
struct RingField {
  enum class Kind { Integer, Float, DType, Bias, Layout, Gather };
  std::string name;
  std::int64_t value = 0;
  Kind kind = Kind::Integer;
};
using RingFields = std::vector<RingField>;
RingFields ring_fields(const AttentionParams& a);

// The ranks' admission of a call, before any data moves: they exchange their settings and whether
// each refused its own input (`refusal`: the InvalidArgument's text, empty where none). Settings
// that differ: InvalidArgument on every rank, naming the first rank and setting that differ (a
// refusal may follow from them, so they come first). A refusal: its InvalidArgument on the rank
// that has it, and a RingError naming that rank and its reason on every other. Every rank throws at
// the same point with no exchange half done, so the ring runs on (State::refused).
void ring_admit(RingRank::State& s, const RingFields& mine, const std::string& refusal, const std::string& what);

// All-gather over the ring: `slots` holds R slots of `slot_bytes` (host-visible), this rank's own
// slot filled; after R - 1 exchanges every slot is filled. `what` names the exchanges in errors.
void ring_allgather(RingRank::State& s, Buffer& slots, std::uint64_t slot_bytes, const std::string& what);

// Runs `f`; on any exception tells the other ranks (RingTransport::fail), keeps it as the failure
// that stopped this rank's ring, waits for this rank's device work in flight, and rethrows; but a
// refusal every rank agreed on (ring_admit) leaves the ring running. Where an earlier call's
// failure stopped the ring, RingError at once (State::stopped).
template <class F>
auto ring_guard(RingRank::State& s, F&& f) {
  if (!s.stopped.empty())
    throw RingError("this RingRank's ring stopped in an earlier call (" + s.stopped +
                    "); a ring does not run again after a failure: make a new transport and RingRank on every rank");
  s.refused = false;
  try {
    return f();
  } catch (const std::exception& e) {
    if (s.refused) {
      s.end_call();
      throw;
    }
    s.transport->fail(e.what());
    s.stopped = e.what();
    try {
      s.recorder.wait();
      s.setup.wait();
    } catch (...) {
    }
    s.end_call();
    throw;
  }
}

// A ring call on this rank: `check` (its parameters' validate(), its buffers: InvalidArgument),
// the ranks' admission of the call with its settings `fields` (ring_admit), then body(transport),
// all under ring_guard.
template <class Check, class F>
auto ring_call(RingRank::State& s, const RingFields& fields, const std::string& what, Check&& check, F&& body) {
  return ring_guard(s, [&] {
    std::string refusal;
    try {
      check();
    } catch (const InvalidArgument& e) {
      refusal = e.what();
    }
    ring_admit(s, fields, refusal, what);
    return body(*s.transport);
  });
}

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace detail
}  // namespace relpos
