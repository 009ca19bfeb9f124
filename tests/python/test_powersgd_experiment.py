"""The shortened check of experiments/powersgd-vs-onebit (the full runs take about an hour on
2 cores: its README): run.py on the small GPT at a fifth of its steps, Adam and Adam +
PowerSGD over 5 seeds; its sweep.csv is what experiments/claims/gap.py reads for the claims
table's real-model rows, and summarize.py makes the table and the figure from the folders."""

import csv
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "experiments" / "powersgd-vs-onebit"
FORTUNES = pathlib.Path("/usr/share/games/fortunes/fortunes")

pytestmark = pytest.mark.skipif(not FORTUNES.exists(), reason="no fortunes (apt-get install "
                                "fortunes): the GPT's corpus")


def run(*args, cwd=ROOT):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_runner_gap_and_summary_end_to_end(tmp_path):
    out = tmp_path / "runs"
    log = run(EXPERIMENT / "run.py", out, "--smoke", "--models", "gpt", "--only", "adam",
              "powersgd_r2", "--seeds", 1, 2, 3, 4, 5)
    assert log.count("completed") == 10, log
    with open(out / "gpt" / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["optimizer"], r["seed"]) for r in rows) == sorted(
        (k, str(s)) for k in ("adam", "powersgd_r2") for s in range(1, 6))
    # Both presets priced: the run's own (Ethernet) and recost's InfiniBand columns.
    header = (out / "gpt" / "adam-seed1" / "metrics.csv").read_text().splitlines()[0]
    assert "sim_time_s" in header and "sim_time_s@infiniband_qdr_v100x8" in header
    gap = run(ROOT / "experiments" / "claims" / "gap.py", out / "gpt", "--arm", "powersgd_r2",
              "--baseline", "adam", "--metric", "eval_loss")
    assert any(v in gap for v in ("reproduced", "partly", "refuted")), gap
    table = run(EXPERIMENT / "summarize.py", out, "--figure", tmp_path / "figure.png",
                cwd=EXPERIMENT)
    assert "Adam + PowerSGD r=2" in table and (tmp_path / "figure.png").stat().st_size > 10000
