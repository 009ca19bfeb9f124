// The one check after every MPI call of the MPI transport and the MPI probe:
// a failed call becomes an exception naming it (both files compile only with
// MPI; this header includes nothing else so that it never pulls MPI in).
#pragma once

#include <mpi.h>

#include <stdexcept>
#include <string>

namespace bitlab {

inline void check_mpi(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(std::string("MPI call failed: ") + call);
}

}  // namespace bitlab
