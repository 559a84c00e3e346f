// The in-process ring: ranks are threads of one process, joined by a hub. A rank posts its send
// (a pointer into its host-visible staging) and its receive; the receiver copies from the sender's
// staging into its own (so the copies of different links run on different threads at once), then
// marks the send taken. Nothing waits past the timeout. A rank that fails, or leaves an exchange,
// before completing the exchange another rank is on stops that rank, named as the first failure
// reported.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/ring.hpp"
#include "ring/host_range.hpp"

namespace relpos {
namespace {

using Clock = std::chrono::steady_clock;

struct Hub {
  explicit Hub(std::uint32_t ranks, std::chrono::milliseconds timeout) : links(ranks), gone(ranks, false), completed(ranks, 0), timeout(timeout) {}

  // (Under the lock.) Whether a rank left before completing exchange n.
  bool failed_before(std::uint64_t n) const {
    for (std::size_t k = 0; k < links.size(); ++k)
      if (gone[k] && completed[k] < n) return true;
    return false;
  }
  // (Under the lock.) Rank r leaves the ring without its exchange: its offer withdrawn (its send
  // buffer may go with it; a copy under way is waited for, none starts) and it counts as gone.
  void leave(std::unique_lock<std::mutex>& lock, std::uint32_t r, const std::string& why) {
    changed.wait(lock, [&] { return !links[r].copying; });
    links[r].offered = false;
    gone[r] = true;
    if (!failure) failure = "rank " + std::to_string(r) + " failed: " + why;
    changed.notify_all();
  }

  // What rank r offers the next rank: its posted send and whether that rank took it.
  struct Link {
    const std::byte* data = nullptr;
    std::uint64_t bytes = 0;
    std::uint64_t exchange = 0;  // the sender's count of exchanges posted, from 1
    bool offered = false;
    bool taken = false;
    bool copying = false;  // the receiver copies from data now: the sender stays until it is done
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Link> links;
  // Ranks that left the ring without their exchange (failed, timed out, or stopped by a failure).
  std::vector<bool> gone;
  // Exchanges each rank has completed (both its links). A rank gone before completing the exchange
  // another is on has failed the ring for it; one gone after completing all it had to (a refused
  // call's reasons sent, its RingRefused uncaught) has not.
  std::vector<std::uint64_t> completed;
  std::chrono::milliseconds timeout;
  std::optional<std::string> failure;  // the first failure reported, with its rank
  std::vector<std::string> labels;     // labels[n]: what exchange n + 1 is called (the first poster's)

  // Who the ring waits for: the rank that posted fewest exchanges, and the exchange it has not.
  std::string laggard() const {
    std::size_t late = 0;
    for (std::size_t r = 1; r < links.size(); ++r)
      if (links[r].exchange < links[late].exchange) late = r;
    const std::uint64_t missing = links[late].exchange;  // the index of its next exchange's label
    return "rank " + std::to_string(late) + " posted nothing for " + (missing < labels.size() ? labels[missing] : "its next exchange");
  }
};

class InProcessTransport final : public RingTransport {
 public:
  InProcessTransport(std::shared_ptr<Hub> hub, std::uint32_t rank) : hub_(std::move(hub)), rank_(rank) {}

  std::uint32_t rank() const override { return rank_; }
  std::uint32_t ranks() const override { return static_cast<std::uint32_t>(hub_->links.size()); }
  std::chrono::milliseconds timeout() const override { return hub_->timeout; }

  void post(const Buffer& send, std::uint64_t send_offset, std::uint64_t send_bytes, Buffer& recv, std::uint64_t recv_offset,
            std::uint64_t recv_bytes, std::string_view what) override {
    if (posted_) throw RingError("rank " + std::to_string(rank_) + ": an exchange was posted before the last one was waited for");
    const std::byte* src = detail::host_range(send, send_offset, send_bytes, "send");
    recv_ = detail::host_range(recv, recv_offset, recv_bytes, "recv");
    recv_bytes_ = recv_bytes;
    what_ = what;
    deadline_ = Clock::now() + hub_->timeout;
    std::lock_guard lock(hub_->mutex);
    Hub::Link& mine = hub_->links[rank_];
    mine = {src, send_bytes, ++exchanges_, true, false};
    if (hub_->labels.size() < exchanges_) hub_->labels.push_back(what_);
    posted_ = true;
    hub_->changed.notify_all();
  }

  void wait() override {
    if (!posted_) return;
    posted_ = false;
    const std::uint32_t R = ranks(), prev = (rank_ + R - 1) % R, next = (rank_ + 1) % R;
    std::unique_lock lock(hub_->mutex);
    Hub::Link& in = hub_->links[prev];
    Hub::Link& out = hub_->links[rank_];
    auto arrived = [&] { return in.offered && in.exchange == exchanges_; };
    auto failed = [&] { return hub_->failed_before(exchanges_); };
    auto leave = [&](RingError e) -> RingError {
      hub_->leave(lock, rank_, e.what());
      return e;
    };
    // A rank that left after completing all it had to stops no exchange under way; one that left
    // before stops every rank (its neighbours wait on it; the others are told here).
    // (A neighbour gone without this exchange has not completed it: failed() covers it.)
    if (!hub_->changed.wait_until(lock, deadline_, [&] { return failed() || arrived(); }))
      throw leave(timed_out("no data from rank " + std::to_string(prev)));
    if (failed()) throw leave(peer_failed());
    if (in.bytes != recv_bytes_)
      throw leave(RingError("rank " + std::to_string(rank_) + " at " + what_ + ": rank " + std::to_string(prev) + " sent " +
                            std::to_string(in.bytes) + " bytes where " + std::to_string(recv_bytes_) +
                            " were expected (do the ranks run the same shapes?)"));
    const std::byte* src = in.data;
    in.copying = true;
    lock.unlock();
    if (recv_bytes_) std::memcpy(recv_, src, recv_bytes_);  // the sender keeps src while it is copied
    lock.lock();
    in.copying = false;
    in.offered = false;
    in.taken = true;
    hub_->changed.notify_all();
    if (!hub_->changed.wait_until(lock, deadline_, [&] { return failed() || out.taken; }))
      throw leave(timed_out("rank " + std::to_string(next) + " did not take this rank's data"));
    if (failed() || !out.taken) throw leave(peer_failed());
    hub_->completed[rank_] = exchanges_;
    hub_->changed.notify_all();
  }

  void fail(const std::string& why) noexcept override {
    try {
      std::unique_lock lock(hub_->mutex);
      hub_->leave(lock, rank_, why);
    } catch (...) {
    }
  }

 private:
  // (Called under the hub's lock.) Names the rank the whole ring waits for, which need not be the
  // one this rank waits for.
  RingError timed_out(const std::string& what_happened) const {
    const double s = std::chrono::duration<double>(hub_->timeout).count();
    return RingError("rank " + std::to_string(rank_) + " at " + what_ + ": " + what_happened + " within " + format_seconds(s) + "; " +
                     hub_->laggard() + " (it failed, died or is stuck)");
  }
  RingError peer_failed() const { return RingError("rank " + std::to_string(rank_) + " stopped at " + what_ + ": " + *hub_->failure); }
  static std::string format_seconds(double s) {
    char text[32];
    std::snprintf(text, sizeof text, "%g s", s);
    return text;
  }

  std::shared_ptr<Hub> hub_;
  std::uint32_t rank_;
  bool posted_ = false;
  std::byte* recv_ = nullptr;
  std::uint64_t recv_bytes_ = 0;
  std::uint64_t exchanges_ = 0;
  std::string what_;
  Clock::time_point deadline_{};
};

InProcessRingOutcome run_threads(std::uint32_t ranks, std::chrono::milliseconds timeout,
                                 const std::function<void(std::uint32_t, RingTransport&)>& body) {
  auto transports = make_in_process_ring(ranks, timeout);
  InProcessRingOutcome outcome;
  outcome.errors.assign(ranks, "");
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r, *transports[r]);
      } catch (const std::exception& e) {
        outcome.errors[r] = e.what();
        transports[r]->fail(e.what());
      } catch (...) {
        outcome.errors[r] = "unknown exception";
        transports[r]->fail("unknown exception");
      }
    });
  for (auto& t : threads) t.join();
  return outcome;
}

}  // namespace

bool InProcessRingOutcome::ok() const {
  return std::all_of(errors.begin(), errors.end(), [](const std::string& e) { return e.empty(); });
}

std::string InProcessRingOutcome::describe() const {
  std::string text;
  for (std::size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) text += (text.empty() ? "" : "; ") + ("rank " + std::to_string(r) + ": " + errors[r]);
  return text;
}

std::vector<std::unique_ptr<RingTransport>> make_in_process_ring(std::uint32_t ranks, std::chrono::milliseconds timeout) {
  if (ranks < 1 || ranks > RingParams::kMaxRanks)
    throw InvalidArgument("ranks = " + std::to_string(ranks) + ": must be in [1, " + std::to_string(RingParams::kMaxRanks) + "]");
  if (timeout.count() <= 0) throw InvalidArgument("timeout = " + std::to_string(timeout.count()) + " ms: must be > 0");
  auto hub = std::make_shared<Hub>(ranks, timeout);
  std::vector<std::unique_ptr<RingTransport>> out;
  for (std::uint32_t r = 0; r < ranks; ++r) out.push_back(std::make_unique<InProcessTransport>(hub, r));
  return out;
}

InProcessRingOutcome run_in_process_ring(std::uint32_t ranks, const InProcessRingOptions& options, const InProcessRankBody& body) {
  return run_threads(ranks, options.timeout, [&](std::uint32_t r, RingTransport& t) {
    ContextOptions o = options.context;
    if (!options.devices.empty()) o.device = options.devices[r % options.devices.size()];
    std::unique_ptr<Context> ctx;
    try {
      ctx = std::make_unique<Context>(o);
    } catch (const std::exception& e) {
      throw Error("rank " + std::to_string(r) + ": no context on device '" + o.device + "': " + e.what());
    }
    body(r, *ctx, t);
  });
}

InProcessRingOutcome run_in_process_ring(const std::vector<Context*>& contexts, std::chrono::milliseconds timeout,
                                         const InProcessRankBody& body) {
  if (contexts.empty()) throw InvalidArgument("contexts: empty: a ring needs at least one rank");
  for (std::size_t r = 0; r < contexts.size(); ++r)
    if (!contexts[r]) throw InvalidArgument("contexts[" + std::to_string(r) + "] is null");
  return run_threads(static_cast<std::uint32_t>(contexts.size()), timeout,
                     [&](std::uint32_t r, RingTransport& t) { body(r, *contexts[r], t); });
}

}  // namespace relpos
