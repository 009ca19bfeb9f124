"""A Simulation that reports like `bitlab run`: "did you mean"
for a keyword, sim.path a pathlib.Path, the start lines, the time per step and the progress
bar, sim.plan(), bitlab's memory estimate against a measured peak, and the warning when
`import torch` came first and OpenMP spins."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

import bitlab
import bitlab.torch

HERE = pathlib.Path(__file__).resolve().parent


def _linear():
    torch.manual_seed(0)
    return torch.nn.Linear(8, 2)


def _loss(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def _batches(workers):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(16, 8, generator=g), torch.randn(16, 2, generator=g))
            for _ in range(workers)]


def test_unknown_keyword_did_you_mean():
    with pytest.raises(TypeError) as e:
        bitlab.torch.Simulation(_linear(), worker=4, steps=3, optimizer="adam")
    assert isinstance(e.value, bitlab.ConfigError)
    assert "did you mean 'workers'?" in str(e.value) and e.value.field == "worker"
    with pytest.raises(bitlab.ConfigError, match="did you mean 'evaluate'"):
        bitlab.torch.Simulation.resume(_linear(), "x", evaluat=print)


def test_quiet_in_a_log_reported_when_asked(tmp_path, capfd):
    """Under pytest stderr is not a terminal: nothing by default; progress=True says the
    start, the plan line and the bar."""
    sim = bitlab.torch.Simulation(_linear(), workers=2, steps=3, optimizer="adam",
                                  out=tmp_path / "quiet")
    assert isinstance(sim.path, pathlib.Path) and sim.path == tmp_path / "quiet"
    assert (sim.path / "config.json").exists() and os.fspath(sim.path) == str(tmp_path / "quiet")
    for _ in range(3):
        sim.run_workers(_loss, _batches(2))
        sim.step()
    sim.close()
    assert capfd.readouterr().err == ""
    sim = bitlab.torch.Simulation(_linear(), workers=2, steps=3, optimizer="adam",
                                  out=tmp_path / "loud", progress=True)
    for _ in range(3):
        sim.run_workers(_loss, _batches(2))
        sim.step()
    sim.close()
    err = capfd.readouterr().err
    assert "bitlab.torch: adam, 2 workers, 18 parameters in 2 tensors, 3 steps" in err
    assert re.search(r"memory: bitlab's estimate [\d.]+ [kMG]?B .* of [\d.]+ [kMGT]?B available",
                     err)
    assert re.search(r"≈ \S+ m?s a step, ≈ \S+ m?s for 3 steps.*torch \d+ %, bitlab \d+ %", err)
    assert re.search(r"\[#+\] 3/3 steps  \S+ steps/s  ETA", err)


def test_plan_times_real_steps(tmp_path):
    sim = bitlab.torch.Simulation(_linear(), workers=2, steps=40, optimizer="adam",
                                  out=tmp_path / "plan")
    with pytest.raises(RuntimeError, match="no step has run yet"):
        sim.plan()
    plan = sim.plan(_loss, lambda step: _batches(2))
    assert sim.steps_done == 2 and plan.steps_timed == 2
    assert plan.step_s > 0 and plan.total_s == pytest.approx(40 * plan.step_s)
    assert plan.torch_share + plan.bitlab_share == pytest.approx(1.0)
    assert 0 <= plan.bitlab_share <= 1
    assert re.fullmatch(r"≈ \S+ m?s a step, ≈ \S+ m?s for 40 steps \(\S+ m?s left\), torch \d+ "
                        r"%, bitlab \d+ % \(timed over 2 steps\)", str(plan)), str(plan)
    assert plan.memory_bytes == sim.memory_estimate > 0
    sim.close()


# Run in a child: torch imported first (the order of every torch script), and a clean
# process whose peak resident memory is bitlab's doing.
CHILD = r"""
import json, resource, sys, warnings
import torch
import bitlab, bitlab.torch
torch.set_num_threads(2)
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(500, 500) for _ in range(4)])
x = torch.randn(8, 500)
model(x).sum().backward()          # torch's own first allocations, before the baseline
for p in model.parameters():
    p.grad = None
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()
before = rss()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    sim = bitlab.torch.Simulation(model, workers=16, steps=3, out=sys.argv[1] + "/a",
                                  optimizer={"name": "zero_one_adam", "lr": 1e-3,
                                             "var_freeze_step": 1, "local_step_scaler": 1})
    for step in range(3):
        sim.run_workers(lambda m, a: m(a).square().mean(), [(x,)] * 16, route="loop")
        sim.step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    estimate = sim.memory_estimate
    sim.close()
    bitlab.torch.Simulation(torch.nn.Linear(2, 1), workers=2, steps=1, optimizer="adam",
                            out=sys.argv[1] + "/b").close()
spin = [str(w.message) for w in caught if issubclass(w.category, bitlab.torch.SpinWarning)]
print(json.dumps({"policy": bitlab.omp_wait_policy(), "spin": spin, "before": before,
                  "peak": peak, "estimate": estimate,
                  "model_bytes": 4 * sum(p.numel() for p in model.parameters())}))
"""


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    out = tmp_path_factory.mktemp("child")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    done = subprocess.run([sys.executable, "-c", CHILD, str(out)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_torch_first_warns_once_with_the_fix(child):
    assert child["policy"].startswith("spin")
    assert len(child["spin"]) == 1, child["spin"]  # two Simulations, one warning
    assert "import bitlab.torch` above `import torch`" in child["spin"][0]
    assert "OMP_WAIT_POLICY=passive python3 script.py" in child["spin"][0]


def test_no_spin_warning_when_passive_or_one_thread():
    from bitlab import _report
    assert not _report.warn_if_spinning("passive (set by bitlab)", 8)
    assert not _report.warn_if_spinning("OMP_WAIT_POLICY=active (set by the user)", 8)
    assert not _report.warn_if_spinning("spin (libgomp's default: ...)", 1)


def test_memory_estimate_covers_the_measured_peak(child):
    """0/1 Adam, 16 workers of a 1 M-parameter model: each worker holds its own parameters,
    so bitlab's buffers dominate. The peak resident memory the run added (from the resident
    memory just before the Simulation, after torch's own first pass) must fit in the
    estimate with the memory check's 1/16 margin, plus what torch allocates per step for
    the model (a gradient buffer and autograd's temporaries: 3 model sizes) and 8 MB of
    allocator slack; and the estimate must not be more than twice the measure (an estimate
    that large would refuse runs that fit)."""
    added = child["peak"] - child["before"]
    estimate = child["estimate"]
    assert added <= estimate * 17 / 16 + 3 * child["model_bytes"] + 8e6, (added, estimate)
    assert estimate <= 2 * added, (added, estimate)
