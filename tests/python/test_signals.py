"""SIGTERM and SIGHUP in a bitlab.torch script, as `bitlab run` takes them:
the step in flight finishes, the checkpoint and summary.json ("interrupted", the
signal) are written, the lock is released, and bitlab.Interrupted (a SystemExit with the
CLI's exit status) is raised. Real signals, sent to child processes."""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch

import bitlab
import bitlab.torch

SCRIPT = r"""
import os, signal, sys, json
import torch, bitlab, bitlab.torch
mode, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
x, y = torch.randn(2, 8, 4), torch.randn(2, 8, 1)

def run(sim, at_step=None):
    for step in range(sim.steps_done + 1, sim.steps + 1):
        for w in sim.local_workers:
            with sim.worker(w) as wk:
                loss = torch.nn.functional.mse_loss(model(x[w]), y[w])
                loss.backward()
                wk.loss = loss.item()
            if at_step and w == 0:
                at_step(step)
        sim.step()

def simulation(name, steps):
    return bitlab.torch.Simulation(model, workers=2, steps=steps, seed=1, optimizer="adam",
                                   checkpoint_every=1000, out=os.path.join(out, name))

if mode == "term":
    # SIGHUP sent to itself in step 3's first block, caught as bitlab.Interrupted
    sim = simulation("hup", 50)
    try:
        run(sim, lambda step: step == 3 and os.kill(os.getpid(), signal.SIGHUP))
    except bitlab.Interrupted as e:
        print(json.dumps({"code": e.code, "signal": e.signal, "steps": e.steps_done}),
              flush=True)
    # then SIGTERM from the parent while it steps, not caught: the script ends with 143
    sim = simulation("term", 10 ** 9)
    run(sim, lambda step: step == 2 and print("ready", flush=True))
else:
    # SIGTERM after the last step: close() writes the summary, then the signal ends it
    sim = simulation("late", 2)
    run(sim)
    os.kill(os.getpid(), signal.SIGTERM)
    print("alive after the signal", flush=True)
    sim.close()
    print("alive after close", flush=True)
"""


def _summary(path):
    with open(os.path.join(path, "summary.json")) as f:
        return json.load(f)


def _metric_rows(path):
    with open(os.path.join(path, "metrics.csv")) as f:
        return len(f.read().splitlines()) - 1


def test_sigterm_and_sighup_end_the_run_as_the_cli(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    term = subprocess.Popen([sys.executable, "-c", SCRIPT, "term", str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    late = subprocess.Popen([sys.executable, "-c", SCRIPT, "late", str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        hup = json.loads(term.stdout.readline())
        assert term.stdout.readline() == "ready\n"
        term.send_signal(signal.SIGTERM)
        _, term_err = term.communicate(timeout=120)
        late_out, late_err = late.communicate(timeout=120)
    finally:
        for p in (term, late):
            if p.poll() is None:
                p.kill()
    # SIGHUP: caught in the script; the run stopped after step 3, the step in flight
    assert hup == {"code": 129, "signal": "SIGHUP", "steps": 3}
    summary = _summary(tmp_path / "hup")
    assert (summary["status"], summary["signal"]) == ("interrupted", "SIGHUP")
    assert _metric_rows(tmp_path / "hup") == 3
    assert (tmp_path / "hup" / "checkpoint.bin").exists()
    assert not (tmp_path / "hup" / ".bitlab.lock").exists()
    # SIGTERM from outside, not caught: exit 143 as `bitlab run`, everything written
    assert term.returncode == 143, term_err
    summary = _summary(tmp_path / "term")
    assert (summary["status"], summary["signal"]) == ("interrupted", "SIGTERM")
    assert summary["steps_completed"] == _metric_rows(tmp_path / "term") >= 2
    assert (tmp_path / "term" / "checkpoint.bin").exists()
    assert not (tmp_path / "term" / ".bitlab.lock").exists()
    assert "SIGTERM: the run stopped after step" in term_err and "resume" in term_err
    # after the last step: held until close() wrote the summary, then it ends the process
    assert late.returncode == -signal.SIGTERM, late_err
    assert late_out == "alive after the signal\n"
    assert _summary(tmp_path / "late")["status"] == "completed"
    # the interrupted run resumes from its checkpoint
    model = torch.nn.Linear(4, 1)
    sim = bitlab.torch.Simulation.resume(model, tmp_path / "hup")
    assert sim.steps_done == 3
    sim.close()


def test_handlers_are_put_back(tmp_path):
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("this process has a SIGTERM handler of its own")
    sim = bitlab.torch.Simulation(torch.nn.Linear(2, 1), workers=2, steps=2, optimizer="adam",
                                  out=tmp_path / "r")
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    sim.close()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
