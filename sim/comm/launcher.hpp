// What a parallel launcher told this process about its place among the
// processes it started: `mpirun`/`mpiexec` (Open MPI's
// OMPI_COMM_WORLD_RANK/SIZE, MPICH's and Intel MPI's PMI_RANK/SIZE) or a
// Slurm array job (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_MIN/COUNT). Read from
// the environment only; MPI itself is not initialised.
#pragma once

#include <optional>
#include <string>

namespace bitlab {

struct LauncherRank {
  int rank = 0;
  int size = 1;
  std::string source;  // the variables it came from, for messages
};

// The MPI launcher's rank and size (OMPI_* or PMI_*), when it started more
// than one process.
std::optional<LauncherRank> mpi_launcher_rank();

// mpi_launcher_rank(), else a Slurm array task (index from the array's
// minimum): what `bitlab sweep --shard auto` uses.
std::optional<LauncherRank> shard_launcher_rank();

// Environment variables the MPI launchers set per process; the sweep's child
// runs do not inherit them (they are not ranks of anything).
bool is_launcher_variable(const std::string& name);

}  // namespace bitlab
