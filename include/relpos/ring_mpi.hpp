#pragma once
// The MPI transport of ring attention: each MPI rank is one ring rank (`mpirun -np R ...`), for
// rings that span several machines. In the optional library relpos::mpi (built where CMake finds
// MPI; link it with relpos::relpos). This header names no MPI type, so it compiles without mpi.h.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "relpos/ring_transport.hpp"

namespace relpos {

// MPI for the life of the object: MPI_Init_thread (MPI_THREAD_FUNNELED: one thread of the process
// makes every MPI call) on a duplicate of MPI_COMM_WORLD whose errors are returned, not fatal;
// MPI_Finalize at destruction. One per process, for its whole life: MPI cannot be initialised
// again once finalised, so a second MpiRing, alongside the first or after it, is an Error.
class MpiRing {
 public:
  // `timeout`: how long the transport and the root's messages wait for a silent rank.
  MpiRing(int& argc, char**& argv, std::chrono::milliseconds timeout);
  ~MpiRing();
  MpiRing(const MpiRing&) = delete;
  MpiRing& operator=(const MpiRing&) = delete;

  std::uint32_t rank() const;
  std::uint32_t ranks() const;
  // The ring's transport: non-blocking sends and receives (messages over 1 GiB in several), polled
  // with MPI_Test until done, a failure reported by another rank, or the timeout.
  RingTransport& transport();

  // Point-to-point messages beside the ring (the tool's root scatters inputs and gathers results):
  // blocking, under the same timeout and failure reports, RingError on either.
  void send_to(std::uint32_t rank, std::span<const std::byte> bytes, std::string_view what);
  std::vector<std::byte> receive_from(std::uint32_t rank, std::string_view what);

  // Ends every rank of the job (MPI_Abort) once every other rank has called abort() too, or after
  // `grace`, whichever comes first: time for the others to hear the failure this rank reported
  // through transport().fail() and print it (a rank hears at its next exchange or message, so a
  // grace of the timeout covers one step's compute; a rank that has finished, in MPI_Finalize,
  // never calls abort, so the whole grace passes). Reports a failure first if none was.
  [[noreturn]] void abort(int code, std::chrono::milliseconds grace) noexcept;

  // True when this process was started by mpirun (Open MPI, MPICH/PMI, PMIx environments).
  static bool launched_by_mpirun();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace relpos
