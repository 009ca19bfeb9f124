// The byte transport under the communicator (the MPI backend): how ranks that each own
// a contiguous block of workers hand each other the bytes that the simulator's
// collectives already "have" when one process holds every worker.
//
// The communicator and the collectives do all arithmetic themselves, in their
// fixed orders; the transport only moves bytes (alltoall, allgather,
// broadcast). Its two reductions (max, sum) are for bookkeeping that is never
// a metric (measured wall time, bytes handed to MPI): MPI's reduction order is
// not ours.
//
// LocalTransport is the simulator: one rank that owns every worker, where
// every exchange is a no-op. MpiTransport (sim/comm/mpi_transport.cpp, built only
// when CMake finds MPI) runs the same calls over MPI_COMM_WORLD, and over the
// sub-communicators split from it (the hierarchical collectives' node and
// leader communicators).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

namespace bitlab {

// What this rank handed to the transport: bytes it sent to OTHER ranks (its
// own block, which stays in place, is not counted) and the calls made.
struct TransportStats {
  int64_t bytes_sent = 0;
  int64_t calls = 0;
  // Wall seconds spent inside the moving calls (alltoallv, allgatherv,
  // broadcast; MPI_Wtime): waiting for slower ranks included, unless a
  // barrier before each call takes the waiting (set_barrier_before_moves).
  double seconds = 0.0;
  // With that barrier: the seconds spent in it, waiting for the slowest rank.
  double wait_seconds = 0.0;
};

// What was counted between `before` and `now` (a step's share).
inline TransportStats stats_since(const TransportStats& now, const TransportStats& before) {
  return {now.bytes_sent - before.bytes_sent, now.calls - before.calls,
          now.seconds - before.seconds, now.wait_seconds - before.wait_seconds};
}

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  virtual const char* name() const = 0;

  // Rank p sends send_counts[q] bytes at send + send_displs[q] to rank q and
  // receives recv_counts[q] bytes from rank q at recv + recv_displs[q].
  virtual void alltoallv(const uint8_t* send, std::span<const int64_t> send_counts,
                         std::span<const int64_t> send_displs, uint8_t* recv,
                         std::span<const int64_t> recv_counts,
                         std::span<const int64_t> recv_displs) = 0;
  // In place: rank q's bytes buf[displs[q], displs[q] + counts[q]) reach
  // every rank.
  virtual void allgatherv(uint8_t* buf, std::span<const int64_t> counts,
                          std::span<const int64_t> displs) = 0;
  virtual void broadcast(uint8_t* buf, int64_t bytes, int root) = 0;

  // Bookkeeping only (never a metric): max / sum of one double over ranks.
  virtual double max(double v) = 0;
  virtual double sum(double v) = 0;

  // A transport over the ranks of this one that pass the same `color`
  // (MPI_Comm_split), ordered by `key`; color < 0: this rank joins none
  // (nullptr). Collective: every rank calls it, in the same order. Bytes the
  // sub-transport moves count in this transport's stats.
  virtual std::unique_ptr<Transport> split(int color, int key) = 0;

  // Ends every rank at once after an error that the other ranks may not
  // have seen (they would wait forever in the next exchange). One rank: a no-op.
  virtual void abort(int /*exit_status*/) {}

  // Ends this process now with `exit_status`, without MPI_Finalize's
  // handshake with the launcher: every rank calls it once the results are
  // written (a collective has passed), after an interrupt. Open MPI's mpirun,
  // signalled itself, is busy sending the ranks SIGTERM then SIGKILL and never
  // answers the handshake, so a rank waiting in MPI_Finalize would be killed
  // instead of exiting with its status. One rank: a no-op (the caller returns).
  virtual void exit_after_interrupt(int /*exit_status*/) {}

  const TransportStats& stats() const { return stats_; }

  // MPI: every rank meets at a barrier (its time counted apart, in
  // wait_seconds) before each moving call, so `seconds` counts the transfer
  // alone, the quantity a network model prices, and a probe measures. Costs
  // a barrier per call; off by default. Applies to transports split later
  // too. One rank: nothing to wait for (a no-op).
  virtual void set_barrier_before_moves(bool /*on*/) {}

 protected:
  TransportStats stats_;
};

// Runs `work` on every rank of `t`. When it throws a ConfigError on some rank
// (a rank that evaluates reads held-out data the others never open, so errors
// need not be the same everywhere), every rank throws one carrying the
// message and path of the lowest failing rank, so that rank 0 reports it once
// and no rank waits forever in the next exchange. One rank: just runs `work`.
void agree_on_config_errors(Transport& t, const std::function<void()>& work);

// One rank owning every worker: the simulator. Nothing moves.
class LocalTransport final : public Transport {
 public:
  int rank() const override { return 0; }
  int ranks() const override { return 1; }
  const char* name() const override { return "sim"; }
  void alltoallv(const uint8_t* send, std::span<const int64_t> send_counts,
                 std::span<const int64_t> send_displs, uint8_t* recv,
                 std::span<const int64_t> recv_counts,
                 std::span<const int64_t> recv_displs) override;
  void allgatherv(uint8_t*, std::span<const int64_t>, std::span<const int64_t>) override {}
  void broadcast(uint8_t*, int64_t, int) override {}
  double max(double v) override { return v; }
  double sum(double v) override { return v; }
  std::unique_ptr<Transport> split(int color, int) override {
    return color < 0 ? nullptr : std::make_unique<LocalTransport>();
  }
};

// True when this build has the MPI backend (CMake found MPI).
bool mpi_backend_available();

// Initialises MPI (once per process) and returns the MPI_COMM_WORLD transport.
// Throws ConfigError naming --backend when the build has no MPI.
std::unique_ptr<Transport> make_mpi_transport();

}  // namespace bitlab
