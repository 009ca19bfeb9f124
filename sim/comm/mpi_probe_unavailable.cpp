// `bitlab probe` in a build without MPI: a clear refusal (exit 2), as
// `run --backend mpi` gives (transport.cpp). With MPI, mpi_probe.cpp defines
// make_mpi_probe and this file is empty.
#ifndef BITLAB_HAVE_MPI
#include "sim/comm/mpi_probe.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

std::unique_ptr<MpiProbe> make_mpi_probe(int /*ranks_per_node*/) {
  throw ConfigError(
      "probe: this bitlab was built without MPI (CMake did not find it, or -DBITLAB_MPI=OFF), "
      "and a probe times MPI's collectives between ranks; install libopenmpi-dev openmpi-bin "
      "(./setup.sh does) and rebuild",
      "probe");
}

}  // namespace bitlab
#endif
