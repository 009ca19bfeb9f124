#include "sim/comm/transport.hpp"

#include <cstring>
#include <string>

#include "sim/core/schema.hpp"

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

void agree_on_config_errors(Transport& t, const std::function<void()>& work) {
  if (t.ranks() == 1) {
    work();
    return;
  }
  bool failed = false;
  std::string message, path;
  try {
    work();
  } catch (const ConfigError& e) {
    failed = true;
    message = e.what();
    path = e.path();
  }
  // The lowest failing rank, or ranks() when none failed (a bookkeeping max).
  const int root = static_cast<int>(-t.max(-static_cast<double>(failed ? t.rank() : t.ranks())));
  if (root >= t.ranks()) return;
  for (std::string* text : {&message, &path}) {
    uint64_t size = text->size();
    t.broadcast(reinterpret_cast<uint8_t*>(&size), sizeof size, root);
    text->resize(size);
    t.broadcast(reinterpret_cast<uint8_t*>(text->data()), static_cast<int64_t>(size), root);
  }
  throw ConfigError(message, path);
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
