"""Which BLAS library torch ends up calling (Debian's torch links ``libblas.so.3``).

Debian's ``python3-torch`` is built against the generic BLAS interface, so
``torch.__config__.show()`` says ``BLAS_INFO=generic`` whichever library
serves it; what counts is the ``libblas.so.3`` the dynamic linker picks
(``update-alternatives --display libblas.so.3-x86_64-linux-gnu``). Netlib's
reference BLAS is about 6x slower than OpenBLAS on the bridge's models
(docs/building.md, "Your model's BLAS"). This module asks the running process:
it does one matrix product and reads which BLAS file is mapped.

Run as a script it prints one line, e.g.
``torch BLAS: OpenBLAS (openmp) /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3``,
and exits 1 when torch runs on the reference BLAS.
"""

import os
import sys

__all__ = ["torch_blas"]


def _mapped_blas_files():
    """Paths of the BLAS libraries mapped into this process (Linux /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    paths = []
    for line in lines:
        path = line.split(maxsplit=5)[-1] if len(line.split()) >= 6 else ""
        name = os.path.basename(path)
        if ("blas" in name or "mkl" in name) and path not in paths:
            paths.append(path)
    return paths


def torch_blas():
    """``(kind, path)`` of the BLAS torch calls: kind is "OpenBLAS (openmp)", "OpenBLAS
    (pthread)", "OpenBLAS (serial)", "BLIS", "MKL", "reference (netlib)" or "unknown".

    >>> kind, path = torch_blas()   # doctest: +SKIP
    >>> kind
    'OpenBLAS (openmp)'
    """
    import torch

    a = torch.ones(64, 64)
    (a @ a).sum().item()  # loads the BLAS library if it is loaded lazily
    files = _mapped_blas_files()
    for path in files:
        real = os.path.realpath(path)
        if "openblas" in real:
            variant = next((v for v in ("openmp", "pthread", "serial") if v in real), "")
            return (f"OpenBLAS ({variant})" if variant else "OpenBLAS"), real
        if "blis" in real:
            return "BLIS", real
        if "mkl" in real:
            return "MKL", real
    for path in files:
        real = os.path.realpath(path)
        if os.path.basename(real).startswith("libblas.so"):
            return "reference (netlib)", real
    return "unknown", ""


if __name__ == "__main__":
    # Run as a file, this folder is sys.path[0], where bitlab/torch.py would
    # shadow torch itself.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    kind, path = torch_blas()
    print(f"torch BLAS: {kind} {path}".rstrip())
    sys.exit(1 if kind.startswith("reference") else 0)
