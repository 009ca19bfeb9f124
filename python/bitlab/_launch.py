"""Whether this process is one rank of an MPI job, and MPI's library made visible first.

A bridge script started under ``mpirun -np R`` (Open MPI), ``mpiexec`` (MPICH's
Hydra) or ``srun`` (Slurm) is one of R processes; bitlab.torch then splits the
simulated workers over them (docs/slurm.md). The launchers say so in the
environment, before MPI is initialised: that is read here.

Open MPI loads its components as plug-ins that look for ``libmpi``'s symbols
in the global namespace; Python loads extension modules with local symbols,
so ``libmpi`` is loaded once with ``RTLD_GLOBAL`` before ``_bitlab`` (which
links it) when the process was started by a launcher.
"""

import ctypes
import ctypes.util
import os

__all__ = ["launched_ranks", "load_mpi_globally"]


def launched_ranks(environ=None):
    """The job's process count a launcher gave this process (1: started on its own).

    >>> launched_ranks({"OMPI_COMM_WORLD_SIZE": "4"})
    4
    >>> launched_ranks({})
    1
    """
    env = os.environ if environ is None else environ
    for key in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE"):
        if env.get(key, "").isdigit():
            return int(env[key])
    # srun sets SLURM_STEP_ID for the tasks of a job step (sbatch's own shell has none).
    if env.get("SLURM_STEP_ID") is not None and env.get("SLURM_NTASKS", "").isdigit():
        return int(env["SLURM_NTASKS"])
    return 1


def load_mpi_globally():
    """Loads the MPI library with global symbols, when this process was launched as a rank."""
    if launched_ranks() <= 1:
        return None
    name = ctypes.util.find_library("mpi")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name, mode=os.RTLD_GLOBAL)
    except OSError:
        return None
