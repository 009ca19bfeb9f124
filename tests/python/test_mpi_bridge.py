"""A bridge script under mpirun: the workers split over R ranks, the files unchanged.

tests/python/scripts/bridge_job.py is run as one process and under
`mpirun -np R` (R = 2 and 4, loopback, oversubscribed: CI has 2 cores);
metrics.csv and comm_log.csv must be identical byte for byte (wall_s aside),
for the mean's path (Adam), the optimizer's own (1-bit Adam, 0/1 Adam with
local steps) and held rows (LoCo).
"""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import rows_without_wall

SCRIPT = pathlib.Path(__file__).parent / "scripts" / "bridge_job.py"
MPIRUN = shutil.which("mpirun")

pytestmark = pytest.mark.skipif(MPIRUN is None, reason="no mpirun (apt-get install openmpi-bin)")


def run_job(out, optimizer, ranks, mode="loop"):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(SCRIPT), str(out), optimizer, mode]
    if ranks > 1:
        cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--mca", "mpi_yield_when_idle",
               "1", "-np", str(ranks), *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def same_files(a, b):
    for name in ("metrics.csv", "comm_log.csv"):
        x, y = rows_without_wall(a / name), rows_without_wall(b / name)
        first = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), None)
        assert len(x) == len(y) and first is None, (
            f"{name} line {first}: {x[first] if first is not None else len(x)!r} vs "
            f"{y[first] if first is not None else len(y)!r}")


@pytest.mark.parametrize("optimizer", ["adam", "onebit_adam", "zero_one_adam", "loco"])
def test_ranks_give_the_one_process_files(optimizer, tmp_path):
    run_job(tmp_path / "one", optimizer, 1)
    for ranks in (2, 4):
        out = run_job(tmp_path / f"np{ranks}", optimizer, ranks)
        assert out.split()[:2] == ["completed", str(ranks)], out
        same_files(tmp_path / "one", tmp_path / f"np{ranks}")
    # rank 0 alone wrote the folder: one summary, no lock left
    assert not (tmp_path / "np4" / ".bitlab.lock").exists()


def test_one_pass_under_mpi_gives_the_loop_files_to_rounding(tmp_path):
    # run_workers computes each rank's workers in one batched pass; its
    # gradients equal the loop's to float rounding (test_batched.py), so the
    # files are compared as numbers: the metrics to 1e-5 relative.
    import pandas as pd
    run_job(tmp_path / "loop", "adam", 1)
    run_job(tmp_path / "pass2", "adam", 2, mode="one_pass")
    a = pd.read_csv(tmp_path / "loop" / "metrics.csv")
    b = pd.read_csv(tmp_path / "pass2" / "metrics.csv")
    assert len(a) == len(b)
    assert ((a["train_loss"] - b["train_loss"]).abs() <= 1e-5 * a["train_loss"].abs()).all()
    assert (a["bytes_sent_cum"] == b["bytes_sent_cum"]).all()
