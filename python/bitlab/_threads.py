"""OpenMP's wait policy for this process, set before bitlab's module loads.

libgomp lets a thread that ends its share of a parallel region spin for a few
ms before it sleeps; on a machine other processes also use, the spinning
threads take the cores the still-working thread needs (sim/core/threads.hpp,
docs/building.md "A busy machine"). libgomp reads OMP_WAIT_POLICY once, when
it is loaded, so the variable is set here, before ``_bitlab`` (which loads
libgomp) is imported. When libgomp is already loaded (``import torch`` before
``import bitlab`` loads it: Debian's torch uses the same libgomp) it is too
late for this process, and the policy stays libgomp's default; the user's own
OMP_WAIT_POLICY or GOMP_SPINCOUNT always wins. Child ``bitlab run`` processes
of a sweep set the policy themselves either way.
"""

import os

_USER_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
_MARKER = "BITLAB_OMP_WAIT_SET"  # the C++ side's marker (sim/core/threads.cpp)


def _libgomp_loaded():
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any("libgomp" in line for line in maps)
    except OSError:
        return True  # cannot tell: setting the variable might be too late


def set_passive_wait():
    """Sets OMP_WAIT_POLICY=passive when it can still take effect; returns the
    policy in words (what :func:`bitlab.omp_wait_policy` reports)."""
    for name in _USER_VARIABLES:
        if os.environ.get(name):
            if name == "OMP_WAIT_POLICY" and os.environ.get(_MARKER):
                return "passive (set by bitlab)"
            return f"{name}={os.environ[name]} (set by the user)"
    if _libgomp_loaded():
        return ("spin (libgomp's default: OpenMP was loaded before bitlab, e.g. by "
                "import torch; import bitlab first or set OMP_WAIT_POLICY=passive)")
    os.environ["OMP_WAIT_POLICY"] = "passive"
    os.environ[_MARKER] = "1"
    return "passive (set by bitlab)"
