"""OpenMP's wait policy from Python (python/bitlab/_threads.py): `import bitlab`
makes libgomp start passive (its own report: a spin count of 0) when torch has
not loaded libgomp first, and says so when it had; the user's variable wins."""

import os
import subprocess
import sys

import pytest


def _python(code, **env_extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "BITLAB_OMP_WAIT_SET")}
    env.update(env_extra, OMP_DISPLAY_ENV="verbose")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          check=True)


def _spincount(stderr):
    """The spin count libgomp reported when it was loaded (OMP_DISPLAY_ENV)."""
    key = "GOMP_SPINCOUNT = '"
    at = stderr.rfind(key)
    assert at >= 0, stderr
    return stderr[at + len(key):stderr.index("'", at + len(key))]


def test_import_bitlab_makes_libgomp_passive():
    r = _python("import bitlab; print(bitlab.omp_wait_policy())")
    assert r.stdout.strip() == "passive (set by bitlab)"
    assert _spincount(r.stderr) == "0"  # libgomp's default is 300000


def test_the_users_variable_wins():
    r = _python("import bitlab; print(bitlab.omp_wait_policy())", GOMP_SPINCOUNT="4321")
    assert r.stdout.strip() == "GOMP_SPINCOUNT=4321 (set by the user)"
    assert _spincount(r.stderr) == "4321"


def test_after_torch_it_is_too_late_and_bitlab_says_so():
    pytest.importorskip("torch", reason="needs torch (Debian's python3-torch) to load libgomp")
    r = _python("import torch, bitlab; print(bitlab.omp_wait_policy())")
    assert r.stdout.startswith("spin (libgomp's default"), r.stdout
    assert _spincount(r.stderr) == "300000"
