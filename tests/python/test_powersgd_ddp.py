"""bitlab's PowerSGD exchange against torch.distributed itself.

scripts/ddp_powersgd_job.py runs real DistributedDataParallel with torch 1.13's
powerSGD_hook over gloo on the loopback (4 processes); the same model and the
same per-worker batches go through bitlab.torch with gradient_exchange powersgd
and torch.optim.SGD's update (bitlab's sgd). After every step the parameters
must agree to float rounding.

Tolerance: 1e-5 absolute on parameters of size 0.05-0.6. Both sides compute
the same float32 operations in different summation orders (gloo's ring sums,
BLAS's blocked bmm against bitlab's fixed tree and row loops), so they agree to
a few float32 ulps, measured at 1.5e-8 over the 8 steps here; each plant below
(a real mistake in the exchange) moves them by 5e-4 or more. 1e-5 sits between,
with a factor of 50 on either side.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import bitlab.torch as bt  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from powersgd_case import RANKS, STEPS, batch, build_model, loss_of  # noqa: E402

SCRIPT = pathlib.Path(__file__).parent / "scripts" / "ddp_powersgd_job.py"
TOLERANCE = 1e-5

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="this torch has no gloo backend")

# Every case starts PowerSGD at step 3 (start_powerSGD_iter 2, the least torch
# allows with error feedback or warm start), then compresses 6 steps.
CASES = {
    "rank1": {"matrix_approximation_rank": 1},
    "rank2": {"matrix_approximation_rank": 2},
    "rank4": {"matrix_approximation_rank": 4},
    "no_warm_start": {"matrix_approximation_rank": 2, "warm_start": False},
    "no_error_feedback": {"matrix_approximation_rank": 2, "use_error_feedback": False},
    "batched_shapes": {"matrix_approximation_rank": 2, "batch_tensors_with_same_shape": True},
    "start_at_0": {"matrix_approximation_rank": 2, "start_powerSGD_iter": 0,
                   "use_error_feedback": False, "warm_start": False},
    # DDP's plain allreduce over several buckets (see the job script), bitlab's
    # PowerSGD before its start: the same buckets, the same plain mean.
    "several_buckets": {"start_powerSGD_iter": 1000, "width": 600, "bucket_cap_mb": 1,
                        "hook": "allreduce"},
}
COMMON = {"start_powerSGD_iter": 2, "lr": 0.05}


def full_case(name):
    return {**COMMON, **CASES[name]}


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    cases = [full_case(n) for n in CASES]
    (tmp / "cases.json").write_text(json.dumps(cases))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_PORT": str(29500 + os.getpid() % 400)}
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp / "ddp.pt"),
                           str(tmp / "cases.json")], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(zip(CASES, torch.load(tmp / "ddp.pt")))


def bitlab_trace(case, tmp_path, plant=None, order=None, monkeypatch=None):
    """The parameters after every step through bitlab.torch; `plant` overrides exchange
    fields on bitlab's side only, `order` replaces the recorded gradient order."""
    model = build_model(case.get("width", 32))
    exchange = {"name": "powersgd",
                **{k: v for k, v in case.items() if k not in ("lr", "width", "hook")},
                **(plant or {})}
    if order is not None:
        real = bt.Simulation._hand_gradient_order

        def planted(self):
            self._ready_order = order(self._ready_order)
            real(self)
        monkeypatch.setattr(bt.Simulation, "_hand_gradient_order", planted)
    sim = bt.Simulation(model, workers=RANKS, steps=STEPS, out=tmp_path / "run",
                        optimizer={"name": "sgd", "lr": case["lr"], "gradient_exchange": exchange})
    trace = []
    with sim:
        for step in range(STEPS):
            for w in sim.local_workers:
                with sim.worker(w):
                    x, y = batch(step, w)
                    loss_of(model(x), y).backward()
            sim.step()
            trace.append([p.detach().clone() for p in model.parameters()])
    return trace


def largest_gap(ours, theirs):
    return max(float((a - b).abs().max()) for step_a, step_b in zip(ours, theirs)
               for a, b in zip(step_a, step_b))


@pytest.mark.parametrize("name", list(CASES))
def test_parameters_agree_with_ddp_every_step(name, ddp_results, tmp_path):
    ours = bitlab_trace(full_case(name), tmp_path)
    theirs = ddp_results[name]["params"]
    for step in range(STEPS):
        gap = largest_gap([ours[step]], [theirs[step]])
        assert gap <= TOLERANCE, f"{name}: step {step + 1}: parameters differ by {gap:.3g}"


def test_ddp_buckets_are_the_ones_bitlab_plans(ddp_results, tmp_path):
    # Step 1 (DDP's first iteration): one bucket, the model's order; then the
    # rebuilt buckets in the order the backward produced the gradients. bitlab
    # logs one allreduce per bucket of its plan: the same sizes, in order.
    seen = ddp_results["several_buckets"]["buckets"]
    model = build_model(600)
    sizes = [p.numel() for p in model.parameters()]
    ddp_steps = {}
    for it, idx, members in seen:
        ddp_steps.setdefault(it + 1, {})[idx] = 4 * sum(sizes[k] for k in members)
    assert [b for it, _, b in seen if it == 0] == [list(range(8))]
    assert len(ddp_steps[2]) > 2, "the case must make several buckets"
    bitlab_trace(full_case("several_buckets"), tmp_path)
    import csv
    with open(tmp_path / "run" / "comm_log.csv") as f:
        rows = list(csv.DictReader(f))
    for step in (1, 2, STEPS):
        ours = [int(r["payload_bytes"]) for r in rows if int(r["step"]) == step]
        assert ours == [ddp_steps[step][i] for i in sorted(ddp_steps[step])], step


PLANTS = {
    "error feedback dropped": {"use_error_feedback": False},
    "warm start ignored": {"warm_start": False},
    "start one step late": {"start_powerSGD_iter": 3},
}


@pytest.mark.parametrize("plant", list(PLANTS))
def test_a_planted_mistake_fails_the_comparison(plant, ddp_results, tmp_path):
    ours = bitlab_trace(full_case("rank2"), tmp_path, plant=PLANTS[plant])
    assert largest_gap(ours, ddp_results["rank2"]["params"]) > 50 * TOLERANCE, plant


def test_tensors_in_another_order_fail_the_comparison(ddp_results, tmp_path, monkeypatch):
    # The model's order instead of the backward's: Q's random draws land on
    # other tensors.
    ours = bitlab_trace(full_case("rank2"), tmp_path, order=lambda o: sorted(o),
                        monkeypatch=monkeypatch)
    assert largest_gap(ours, ddp_results["rank2"]["params"]) > 50 * TOLERANCE
