#pragma once
// How the ranks of a ring attention pass data (docs/ring_attention.md): each rank sends to the next
// rank and receives from the previous one, through host-visible staging buffers. Two
// implementations: in-process (one Context per rank, each in its own thread: several GPUs of one
// machine, and tests) below, and MPI (relpos/ring_mpi.hpp, the optional relpos::mpi library).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "relpos/context.hpp"
#include "relpos/error.hpp"

namespace relpos {

class Buffer;

// A failure of the ring itself: a timeout (the message names the silent rank and the step), a
// message of the wrong size, another rank's failure (the message names it and says what it
// reported), a transport error. Every rank of a failed ring throws one, and the ring stops
// (RingRank::stopped); but for RingRefused, below.
class RingError : public Error {
 public:
  using Error::Error;
};

// Another rank refused a ring call before any data moved (its own input was bad: it threw
// InvalidArgument, and the message names it and says why). Unlike the other RingErrors, the ring
// runs on: the same RingRanks take the next call.
class RingRefused : public RingError {
 public:
  using RingError::RingError;
};

class RingTransport {
 public:
  virtual ~RingTransport() = default;
  virtual std::uint32_t rank() const = 0;
  virtual std::uint32_t ranks() const = 0;

  // Posts one exchange and returns at once: `send_bytes` of `send` from `send_offset` go to the
  // next rank ((rank + 1) % ranks), `recv_bytes` from the previous rank land in `recv` at
  // `recv_offset`. Both buffers must be host-visible (Buffer::host_pointer()); neither the host nor
  // the device may write them (nor the device read `recv`) until wait() returns. Posting never
  // waits for this rank's GPU work: a rank posts its receive, then waits for its device and the
  // exchange together. `what` names the exchange in errors ("step 3").
  virtual void post(const Buffer& send, std::uint64_t send_offset, std::uint64_t send_bytes, Buffer& recv, std::uint64_t recv_offset,
                    std::uint64_t recv_bytes, std::string_view what) = 0;
  // Waits for the posted exchange. RingError on a timeout (naming the previous rank, whose data did
  // not come, and the exchange), on a message whose size is not recv_bytes, or when another rank
  // reported a failure.
  virtual void wait() = 0;
  // Tells every other rank that this one failed, with `why`, so that they stop at once with a
  // RingError naming it instead of waiting for their timeout. Best effort; never throws.
  virtual void fail(const std::string& why) noexcept = 0;
  // How long wait() waits.
  virtual std::chrono::milliseconds timeout() const = 0;
};

// ---- In-process ranks ---------------------------------------------------------------------

struct InProcessRingOptions {
  // Device selector of each rank (as ContextOptions::device: an index into Context::devices() or a
  // name substring); rank r takes devices[r % devices.size()]. Empty: every rank takes the
  // default device (RELPOS_DEVICE, then the first discrete GPU, ...).
  std::vector<std::string> devices;
  // Every rank's context is made from these (device replaced as above).
  ContextOptions context{};
  // A rank whose previous rank sends nothing for this long stops with a RingError.
  std::chrono::milliseconds timeout{60000};
};

// One rank's part of an in-process ring: its rank, its transport and its context.
using InProcessRankBody = std::function<void(std::uint32_t rank, Context& ctx, RingTransport& transport)>;

// What each rank of an in-process ring ended with: an empty string for a rank that finished, its
// error message otherwise.
struct InProcessRingOutcome {
  std::vector<std::string> errors;
  bool ok() const;
  // "rank 1: ...; rank 2: ..." over the failed ranks.
  std::string describe() const;
};

// Runs `body` on `ranks` threads, rank r on a Context of its own made from `options` (so on one
// device or several), joined by an in-process transport; returns when every rank has returned or
// failed. A rank whose body throws tells the others (RingTransport::fail), which stop with a
// RingError naming it; nothing waits forever (options.timeout). Contexts are made in each rank's
// thread and destroyed there.
InProcessRingOutcome run_in_process_ring(std::uint32_t ranks, const InProcessRingOptions& options, const InProcessRankBody& body);
// The same on contexts the caller owns (rank r on *contexts[r]; one Context may serve several
// ranks: it is thread-safe).
InProcessRingOutcome run_in_process_ring(const std::vector<Context*>& contexts, std::chrono::milliseconds timeout,
                                         const InProcessRankBody& body);

// The in-process transports of `ranks` ranks that share one hub, for callers who run the threads
// themselves (transports[r] is rank r's; each is used by one thread).
std::vector<std::unique_ptr<RingTransport>> make_in_process_ring(std::uint32_t ranks, std::chrono::milliseconds timeout);

}  // namespace relpos
