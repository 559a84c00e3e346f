// The MPI transport (relpos::mpi, not part of the core library): non-blocking sends and receives
// on a duplicate of MPI_COMM_WORLD, polled so that a rank notices another's failure report (a
// message on its own tag) or its own timeout instead of blocking in MPI forever.
#include "relpos/ring_mpi.hpp"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "relpos/buffer.hpp"
#include "relpos/ring.hpp"

namespace relpos {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kFailureTag = 1;  // a rank's failure report: its text
constexpr int kPointTag = 2;    // send_to / receive_from
constexpr int kStopTag = 3;     // a rank is about to end the job (MpiRing::abort): it has printed what it knows
constexpr int kFirstRingTag = 4;
constexpr std::uint64_t kPiece = 1ull << 30;  // MPI counts are int: messages go in pieces of 1 GiB

std::string seconds(std::chrono::milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", std::chrono::duration<double>(t).count());
  return text;
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(code, text, &n);
  return std::string(text, static_cast<std::size_t>(std::max(n, 0)));
}

}  // namespace

struct MpiRing::State final : RingTransport {
  MPI_Comm comm = MPI_COMM_NULL;
  std::uint32_t my_rank = 0, size = 1;
  std::chrono::milliseconds wait_limit;
  std::uint64_t exchanges = 0;
  bool failed = false;    // the ring failed here: the job must end
  bool reported = false;  // every rank knows: this rank reported, or it heard another's report
  std::string failure_text;
  std::vector<MPI_Request> failure_requests;

  // The posted exchange.
  std::vector<MPI_Request> requests;
  std::vector<std::uint64_t> recv_piece_bytes;  // expected byte count of each receive request (first in `requests`)
  std::string what;
  Clock::time_point deadline{};
  bool posted = false;

  explicit State(std::chrono::milliseconds timeout) : wait_limit(timeout) {}

  std::uint32_t rank() const override { return my_rank; }
  std::uint32_t ranks() const override { return size; }
  std::chrono::milliseconds timeout() const override { return wait_limit; }

  void check(int code, const std::string& call) {
    if (code != MPI_SUCCESS) throw RingError("rank " + std::to_string(my_rank) + ": " + call + " failed: " + mpi_error_text(code));
  }

  int ring_tag() const { return kFirstRingTag + static_cast<int>(exchanges % 30000); }

  void post(const Buffer& send, std::uint64_t send_offset, std::uint64_t send_bytes, Buffer& recv, std::uint64_t recv_offset,
            std::uint64_t recv_bytes, std::string_view label) override {
    if (posted) throw RingError("rank " + std::to_string(my_rank) + ": an exchange was posted before the last one was waited for");
    auto host = [](const Buffer& b, std::uint64_t offset, std::uint64_t bytes, const char* name) {
      if (!b.host_pointer()) throw InvalidArgument(std::string(name) + " buffer: not host-visible (make it with MemoryUse::Host)");
      if (offset > b.size() || bytes > b.size() - offset)
        throw InvalidArgument(std::string(name) + " range [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                              "): outside the buffer of " + std::to_string(b.size()) + " bytes");
      return static_cast<std::byte*>(b.host_pointer()) + offset;
    };
    std::byte* in = host(recv, recv_offset, recv_bytes, "recv");
    const std::byte* out = host(send, send_offset, send_bytes, "send");
    ++exchanges;
    what = label;
    deadline = Clock::now() + wait_limit;
    requests.clear();
    recv_piece_bytes.clear();
    const int prev = static_cast<int>((my_rank + size - 1) % size), next = static_cast<int>((my_rank + 1) % size);
    // A message of 0 bytes is still one request, so that both sides count the same pieces.
    for (std::uint64_t done = 0; done == 0 || done < recv_bytes; done += kPiece) {
      const std::uint64_t n = std::min(kPiece, recv_bytes - done);
      requests.emplace_back();
      recv_piece_bytes.push_back(n);
      check(MPI_Irecv(in + done, static_cast<int>(n), MPI_BYTE, prev, ring_tag(), comm, &requests.back()), "MPI_Irecv");
      if (recv_bytes == 0) break;
    }
    for (std::uint64_t done = 0; done == 0 || done < send_bytes; done += kPiece) {
      const std::uint64_t n = std::min(kPiece, send_bytes - done);
      requests.emplace_back();
      check(MPI_Isend(const_cast<std::byte*>(out) + done, static_cast<int>(n), MPI_BYTE, next, ring_tag(), comm, &requests.back()), "MPI_Isend");
      if (send_bytes == 0) break;
    }
    posted = true;
  }

  // Throws when another rank reported a failure.
  void watch_failures() {
    int flag = 0;
    MPI_Status status;
    check(MPI_Iprobe(MPI_ANY_SOURCE, kFailureTag, comm, &flag, &status), "MPI_Iprobe");
    if (!flag) return;
    int count = 0;
    MPI_Get_count(&status, MPI_CHAR, &count);
    std::string text(static_cast<std::size_t>(std::max(count, 0)), '\0');
    MPI_Recv(text.data(), count, MPI_CHAR, status.MPI_SOURCE, kFailureTag, comm, MPI_STATUS_IGNORE);
    failed = reported = true;
    throw RingError("rank " + std::to_string(my_rank) + " stopped at " + what + ": " + text);
  }

  RingError timed_out(const std::string& what_happened) {
    failed = true;
    return RingError("rank " + std::to_string(my_rank) + " at " + what + ": " + what_happened + " within " + seconds(wait_limit) +
                     " (that rank failed, died or is stuck)");
  }

  // Polls `reqs` until done, a failure report or the deadline. `silent` names who kept them waiting.
  void poll(std::vector<MPI_Request>& reqs, std::vector<MPI_Status>& statuses, const std::function<std::string()>& silent) {
    statuses.resize(reqs.size());
    for (;;) {
      int flag = 0;
      const int code = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, statuses.data());
      if (code != MPI_SUCCESS) {
        std::string text = mpi_error_text(code);
        for (const MPI_Status& st : statuses)
          if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != MPI_ERR_PENDING) text = mpi_error_text(st.MPI_ERROR);
        failed = true;
        throw RingError("rank " + std::to_string(my_rank) + " at " + what + ": MPI reports: " + text +
                        " (a message of another size than expected: do the ranks run the same shapes?)");
      }
      if (flag) return;
      watch_failures();
      if (Clock::now() > deadline) throw timed_out(silent());
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void wait() override {
    if (!posted) return;
    posted = false;
    std::vector<MPI_Status> statuses;
    const std::size_t receives = recv_piece_bytes.size();
    poll(requests, statuses, [&] {
      for (std::size_t i = 0; i < receives; ++i)
        if (requests[i] != MPI_REQUEST_NULL) return "no data from rank " + std::to_string((my_rank + size - 1) % size);
      return "rank " + std::to_string((my_rank + 1) % size) + " did not take this rank's data";
    });
    for (std::size_t i = 0; i < receives; ++i) {
      int count = 0;
      MPI_Get_count(&statuses[i], MPI_BYTE, &count);
      if (static_cast<std::uint64_t>(count) != recv_piece_bytes[i]) {
        failed = true;
        throw RingError("rank " + std::to_string(my_rank) + " at " + what + ": rank " + std::to_string((my_rank + size - 1) % size) + " sent " +
                        std::to_string(count) + " bytes where " + std::to_string(recv_piece_bytes[i]) +
                        " were expected (do the ranks run the same shapes?)");
      }
    }
  }

  void fail(const std::string& why) noexcept override {
    failed = true;
    if (reported) return;  // this rank reported already, or heard another's report, which every rank hears
    reported = true;
    try {
      failure_text = "rank " + std::to_string(my_rank) + " failed: " + why;
      for (std::uint32_t k = 0; k < size; ++k) {
        if (k == my_rank) continue;
        failure_requests.emplace_back();
        MPI_Isend(failure_text.data(), static_cast<int>(failure_text.size()), MPI_CHAR, static_cast<int>(k), kFailureTag, comm,
                  &failure_requests.back());
      }
      // Let the reports leave (a dead rank never takes its own: do not wait long).
      const auto until = Clock::now() + std::chrono::milliseconds(200);
      int flag = 0;
      while (!flag && Clock::now() < until) {
        MPI_Testall(static_cast<int>(failure_requests.size()), failure_requests.data(), &flag, MPI_STATUSES_IGNORE);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    } catch (...) {
    }
  }
};

MpiRing::MpiRing(int& argc, char**& argv, std::chrono::milliseconds timeout) : state_(std::make_unique<State>(timeout)) {
  if (timeout.count() <= 0) throw InvalidArgument("timeout = " + std::to_string(timeout.count()) + " ms: must be > 0");
  // MPI_Initialized stays true after MPI_Finalize, and MPI cannot be initialised again once
  // finalised: a second MpiRing after the first is gone is told so, not that MPI is running.
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (finalised)
    throw Error("MpiRing: MPI was finalised (by an earlier MpiRing's destruction, or by the application) and cannot be initialised "
                "again in this process (keep one MpiRing for the process's whole life)");
  if (initialised) throw Error("MpiRing: MPI is initialised already (one MpiRing per process, and it initialises MPI)");
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) throw RingError("MPI_Init_thread failed");
  State& s = *state_;
  MPI_Comm_dup(MPI_COMM_WORLD, &s.comm);
  MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(s.comm, &rank);
  MPI_Comm_size(s.comm, &size);
  s.my_rank = static_cast<std::uint32_t>(rank);
  s.size = static_cast<std::uint32_t>(size);
}

MpiRing::~MpiRing() {
  State& s = *state_;
  // Requests of a failed exchange may still be pending, which MPI_Finalize would wait on: a job
  // whose ring failed ends as a whole.
  if (s.failed) abort(1, std::chrono::milliseconds(500));
  MPI_Comm_free(&s.comm);
  MPI_Finalize();
}

std::uint32_t MpiRing::rank() const { return state_->my_rank; }
std::uint32_t MpiRing::ranks() const { return state_->size; }
RingTransport& MpiRing::transport() { return *state_; }

void MpiRing::send_to(std::uint32_t rank, std::span<const std::byte> bytes, std::string_view what) {
  State& s = *state_;
  s.what = what;
  s.deadline = Clock::now() + s.wait_limit;
  std::uint64_t size = bytes.size();
  std::vector<MPI_Request> reqs(1);
  s.check(MPI_Isend(&size, 8, MPI_BYTE, static_cast<int>(rank), kPointTag, s.comm, &reqs[0]), "MPI_Isend");
  for (std::uint64_t done = 0; done < size; done += kPiece) {
    reqs.emplace_back();
    s.check(MPI_Isend(const_cast<std::byte*>(bytes.data()) + done, static_cast<int>(std::min(kPiece, size - done)), MPI_BYTE,
                      static_cast<int>(rank), kPointTag, s.comm, &reqs.back()),
            "MPI_Isend");
  }
  std::vector<MPI_Status> statuses;
  s.poll(reqs, statuses, [&] { return "rank " + std::to_string(rank) + " did not take this rank's data"; });
}

std::vector<std::byte> MpiRing::receive_from(std::uint32_t rank, std::string_view what) {
  State& s = *state_;
  s.what = what;
  s.deadline = Clock::now() + s.wait_limit;
  std::uint64_t size = 0;
  std::vector<MPI_Request> reqs(1);
  std::vector<MPI_Status> statuses;
  auto silent = [&] { return "no data from rank " + std::to_string(rank); };
  s.check(MPI_Irecv(&size, 8, MPI_BYTE, static_cast<int>(rank), kPointTag, s.comm, &reqs[0]), "MPI_Irecv");
  s.poll(reqs, statuses, silent);
  std::vector<std::byte> out(size);
  reqs.clear();
  for (std::uint64_t done = 0; done < size; done += kPiece) {
    reqs.emplace_back();
    s.check(MPI_Irecv(out.data() + done, static_cast<int>(std::min(kPiece, size - done)), MPI_BYTE, static_cast<int>(rank), kPointTag, s.comm,
                      &reqs.back()),
            "MPI_Irecv");
  }
  if (!reqs.empty()) s.poll(reqs, statuses, silent);
  return out;
}

void MpiRing::abort(int code, std::chrono::milliseconds grace) noexcept {
  State& s = *state_;
  const MPI_Comm comm = s.comm == MPI_COMM_NULL ? MPI_COMM_WORLD : s.comm;
  // The first MPI_Abort ends every rank at once, whatever it was printing. A rank still computing
  // hears of the failure only at its next exchange, so each rank says it is done reporting and
  // waits for the others' word (at most `grace`: a rank may be stuck or dead) before aborting.
  try {
    if (!s.reported) s.fail("it ended the job (exit status " + std::to_string(code) + ")");
    const char done = 0;
    std::vector<MPI_Request> notices;
    for (std::uint32_t k = 0; k < s.size; ++k) {
      if (k == s.my_rank) continue;
      notices.emplace_back();
      MPI_Isend(&done, 1, MPI_CHAR, static_cast<int>(k), kStopTag, comm, &notices.back());
    }
    std::vector<bool> heard(s.size, false);
    std::uint32_t waiting = s.size - 1;
    const auto until = Clock::now() + grace;
    while (waiting > 0 && Clock::now() < until) {
      int flag = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kStopTag, comm, &flag, &status) != MPI_SUCCESS) break;
      if (!flag) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      char byte = 0;
      MPI_Recv(&byte, 1, MPI_CHAR, status.MPI_SOURCE, kStopTag, comm, MPI_STATUS_IGNORE);
      const auto source = static_cast<std::size_t>(status.MPI_SOURCE);
      if (source < heard.size() && !heard[source]) {
        heard[source] = true;
        --waiting;
      }
    }
  } catch (...) {
  }
  MPI_Abort(comm, code);
  std::_Exit(code);
}

bool MpiRing::launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(name)) return true;
  return false;
}

}  // namespace relpos
