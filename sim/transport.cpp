#include "sim/transport.hpp"

#include <cstring>

#include "sim/schema.hpp"

namespace bitlab {

void LocalTransport::alltoallv(const uint8_t* send, std::span<const int64_t> send_counts,
                               std::span<const int64_t> send_displs, uint8_t* recv,
                               std::span<const int64_t> /*recv_counts*/,
                               std::span<const int64_t> recv_displs) {
  // The only peer is this rank itself.
  if (send_counts[0] > 0 && send + send_displs[0] != recv + recv_displs[0]) {
    std::memmove(recv + recv_displs[0], send + send_displs[0], static_cast<size_t>(send_counts[0]));
  }
}

#ifndef BITLAB_HAVE_MPI
bool mpi_backend_available() {
  return false;
}

std::unique_ptr<Transport> make_mpi_transport() {
  throw ConfigError(
      "--backend mpi: this bitlab was built without MPI (CMake did not find it, or "
      "-DBITLAB_MPI=OFF); install libopenmpi-dev openmpi-bin (./setup.sh does) and rebuild, or "
      "use --backend sim");
}
#endif

}  // namespace bitlab
