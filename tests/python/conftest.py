"""Fixtures of the Python package's tests (run by CTest's `python` entry with
PYTHONPATH=build/python; `./setup.sh test` runs them)."""

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def binary():
    """The bitlab binary of this build (CTest sets BITLAB_BINARY)."""
    path = os.environ.get("BITLAB_BINARY") or str(ROOT / "build" / "bitlab")
    if not os.path.exists(path):
        pytest.fail(f"no bitlab binary at {path}: build first (./setup.sh)")
    return path


@pytest.fixture
def cli(binary):
    """Runs `bitlab ARGS...`; returns the completed process (never raises on exit status)."""
    def run(*args, cwd=None):
        return subprocess.run([binary, *map(str, args)], capture_output=True, text=True,
                              cwd=cwd, env={**os.environ, "OMP_NUM_THREADS": "2"})
    return run


def rows_without_wall(path):
    """A run's csv with its wall_s column removed (the one column that is not deterministic)."""
    lines = pathlib.Path(path).read_text().splitlines()
    header = lines[0].split(",")
    if "wall_s" not in header:
        return lines
    k = header.index("wall_s")
    return [",".join(c for i, c in enumerate(line.split(",")) if i != k) for line in lines]


def write_json(path, obj):
    path = pathlib.Path(path)
    path.write_text(json.dumps(obj, indent=1))
    return path
