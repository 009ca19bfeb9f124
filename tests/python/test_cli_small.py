"""Small CLI cases, through the binary: a recost that cannot write
its results exits 4 (as the README says of every command), and a results folder that
cannot be made leaves no empty folder behind."""

import os

import pytest

from conftest import write_json

QUICK = {"name": "small", "seed": 1, "steps": 3, "problem": {"name": "quadratic", "dim": 8},
         "cluster": {"workers": 2}, "optimizer": {"name": "sgd", "lr": 0.01},
         "network": {"preset": "ethernet_40g_v100x4"}}


def test_recost_that_cannot_write_exits_4(cli, tmp_path):
    # A full disk, portably (as tests/test_cli.cpp): the file recost writes before renaming
    # it over metrics.csv is a link to /dev/full, where every write fails with ENOSPC.
    if not os.path.exists("/dev/full"):
        pytest.skip("this system has no /dev/full")
    folder = tmp_path / "run"
    done = cli("run", write_json(tmp_path / "q.json", QUICK), "--out", folder, "--quiet")
    assert done.returncode == 0, done.stderr
    before = (folder / "metrics.csv").read_text()
    os.symlink("/dev/full", folder / "metrics.csv.recost.tmp")
    done = cli("recost", folder, "--network", "infiniband_qdr_v100x8", "--label", "ib")
    assert done.returncode == 4, done.stderr
    assert "No space left on device" in done.stderr and "metrics.csv.recost.tmp" in done.stderr
    assert (folder / "metrics.csv").read_text() == before  # left untouched


@pytest.mark.parametrize("length", [256, 300, 1000])
def test_a_name_too_long_for_the_file_system_leaves_no_results_folder(cli, tmp_path, length):
    # Refused by name, before any folder is made (docs/experiments.md: at most 200 bytes).
    path = write_json(tmp_path / "q.json", {**QUICK, "name": "x" * length})
    done = cli("run", path, "--quiet", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "name = " in done.stderr and f"is {length} bytes long: at most 200" in done.stderr
    assert not (tmp_path / "results").exists()


def test_a_name_the_file_system_takes_still_runs(cli, tmp_path):
    path = write_json(tmp_path / "q.json", {**QUICK, "name": "x" * 200})
    done = cli("run", path, "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "results" / ("x" * 200) / "sgd-seed1" / "summary.json").exists()
