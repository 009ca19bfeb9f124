// The MPI backend's transport: the byte exchanges of transport.hpp over
// MPI_COMM_WORLD. Built only when CMake finds MPI (BITLAB_HAVE_MPI). No
// metric ever goes through an MPI reduction: max/sum serve measured wall time
// and byte counts only.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/comm/mpi_call.hpp"
#include "sim/comm/transport.hpp"

namespace bitlab {

namespace {

int to_int(int64_t v, const char* what) {
  // MPI's counts and displacements are int: a larger exchange would need
  // derived datatypes (not done: bitlab's MPI runs are small).
  if (v < 0 || v > std::numeric_limits<int>::max()) {
    throw std::runtime_error(std::string("MPI transport: ") + what + " of " + std::to_string(v) +
                             " bytes exceeds MPI's int range");
  }
  return static_cast<int>(v);
}

class MpiTransport final : public Transport {
 public:
  MpiTransport() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      check_mpi(MPI_Init(nullptr, nullptr), "MPI_Init");
      owns_init_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks_);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  // A sub-communicator (split): counts into the parent's stats, and follows
  // its barrier setting.
  MpiTransport(MPI_Comm comm, TransportStats* counts, const bool* barrier)
      : comm_(comm), counts_(counts), barrier_(barrier) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &ranks_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  ~MpiTransport() override {
    if (comm_ != MPI_COMM_WORLD) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Comm_free(&comm_);
      return;
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_init_ && !finalized) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }
  const char* name() const override { return "mpi"; }

  void alltoallv(const uint8_t* send, std::span<const int64_t> send_counts,
                 std::span<const int64_t> send_displs, uint8_t* recv,
                 std::span<const int64_t> recv_counts,
                 std::span<const int64_t> recv_displs) override {
    convert(send_counts, sc_, "alltoallv count");
    convert(send_displs, sd_, "alltoallv displacement");
    convert(recv_counts, rc_, "alltoallv count");
    convert(recv_displs, rd_, "alltoallv displacement");
    for (int q = 0; q < ranks_; ++q) {
      if (q != rank_) counts_->bytes_sent += send_counts[q];
    }
    ++counts_->calls;
    timed([&] {
      check_mpi(MPI_Alltoallv(send, sc_.data(), sd_.data(), MPI_BYTE, recv, rc_.data(), rd_.data(),
                          MPI_BYTE, comm_),
            "MPI_Alltoallv");
    });
  }

  void allgatherv(uint8_t* buf, std::span<const int64_t> counts,
                  std::span<const int64_t> displs) override {
    convert(counts, rc_, "allgatherv count");
    convert(displs, rd_, "allgatherv displacement");
    counts_->bytes_sent += counts[rank_] * (ranks_ - 1);
    ++counts_->calls;
    timed([&] {
      check_mpi(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, buf, rc_.data(), rd_.data(), MPI_BYTE,
                           comm_),
            "MPI_Allgatherv");
    });
  }

  void broadcast(uint8_t* buf, int64_t bytes, int root) override {
    if (rank_ == root) counts_->bytes_sent += bytes * (ranks_ - 1);
    ++counts_->calls;
    timed([&] {
      check_mpi(MPI_Bcast(buf, to_int(bytes, "broadcast"), MPI_BYTE, root, comm_), "MPI_Bcast");
    });
  }

  void set_barrier_before_moves(bool on) override { barrier_flag_ = on; }

  void abort(int exit_status) override { MPI_Abort(MPI_COMM_WORLD, exit_status); }

  void exit_after_interrupt(int exit_status) override {
    // Whatever stdio still holds (rank 0's folder on stdout); the results files
    // are closed and summary.json renamed into place before this.
    std::fflush(nullptr);
    _exit(exit_status);
  }

  std::unique_ptr<Transport> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub), "MPI_Comm_split");
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiTransport>(sub, counts_, barrier_);
  }

  double max(double v) override {
    double out = v;
    check_mpi(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm_), "MPI_Allreduce");
    return out;
  }
  double sum(double v) override {
    double out = v;
    check_mpi(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, comm_), "MPI_Allreduce");
    return out;
  }

 private:
  // One moving call, timed; after the barrier when it is on.
  template <class Call>
  void timed(const Call& call) {
    if (*barrier_) {
      const double w0 = MPI_Wtime();
      check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
      counts_->wait_seconds += MPI_Wtime() - w0;
    }
    const double t0 = MPI_Wtime();
    call();
    counts_->seconds += MPI_Wtime() - t0;
  }
  static void convert(std::span<const int64_t> in, std::vector<int>& out, const char* what) {
    out.resize(in.size());
    for (size_t q = 0; q < in.size(); ++q) out[q] = to_int(in[q], what);
  }
  MPI_Comm comm_ = MPI_COMM_WORLD;
  TransportStats* counts_ = &stats_;  // the world transport's stats
  bool barrier_flag_ = false;         // the world transport's setting
  const bool* barrier_ = &barrier_flag_;
  int rank_ = 0, ranks_ = 1;
  bool owns_init_ = false;
  std::vector<int> sc_, sd_, rc_, rd_;
};

}  // namespace

bool mpi_backend_available() {
  return true;
}

std::unique_ptr<Transport> make_mpi_transport() {
  return std::make_unique<MpiTransport>();
}

}  // namespace bitlab
