"""sim.run_workers: every worker's gradient in one batched pass, handed to bitlab as the loop does.

The batched gradients equal the loop's to float rounding (test_batched.py states and
justifies the per-element tolerance); here, through the whole bridge: the same run with
run_workers and with the `with sim.worker(w)` loop ends at parameters within the tolerance
below, and a model one pass cannot take runs the loop itself, bit for bit, saying why once.
"""

import json

import pytest
import torch

import bitlab
import bitlab.torch

WORKERS, STEPS = 4, 6


def batch(w, step):
    g = torch.Generator().manual_seed(100 * step + w)
    return torch.randn(8, 5, generator=g), torch.randn(8, 3, generator=g)


def loss_fn(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def mlp(norm=False):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(5, 16)]
    if norm:
        layers.append(torch.nn.BatchNorm1d(16))
    layers += [torch.nn.Tanh(), torch.nn.Linear(16, 3)]
    return torch.nn.Sequential(*layers)


def train(model, out, route, optimizer=None):
    sim = bitlab.torch.Simulation(model, workers=WORKERS, steps=STEPS, seed=1, out=out,
                                  optimizer=optimizer or {"name": "adam", "lr": 0.01})
    losses = []
    for step in range(1, STEPS + 1):
        batches = [batch(w, step) for w in range(WORKERS)]
        if route == "with":
            for w in sim.local_workers:
                with sim.worker(w) as wk:
                    loss = loss_fn(model, *batches[w])
                    loss.backward()
                    wk.loss = loss.item()
        else:
            losses.append(sim.run_workers(loss_fn, batches, route=route))
        sim.step()
    summary = sim.close()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), summary, losses


def test_one_pass_tracks_the_loop(tmp_path):
    # Six Adam steps from the same start: the batched gradients differ from the loop's
    # by a few ulps of the largest gradient (test_batched.py: at most 3.2 eps·G for an
    # MLP), and Adam's normalised step m/sqrt(v) carries that relative difference into
    # each update of lr = 0.01, so the parameters may differ by about
    # 6 steps · 0.01 · 1e-6 ≈ 1e-7; 1e-5 leaves a margin of 100 over that while a
    # wrong gradient (another worker's batch, a missing worker) moves them by ~1e-3.
    batched, summary, losses = train(mlp(), tmp_path / "b", "batched")
    looped, _, _ = train(mlp(), tmp_path / "l", "with")
    assert summary["status"] == "completed"
    assert (batched - looped).abs().max().item() <= 1e-5
    assert len(losses) == STEPS and len(losses[0]) == WORKERS
    # and bit for bit run to run
    again, _, _ = train(mlp(), tmp_path / "b2", "batched")
    assert torch.equal(batched, again)


def test_a_wrong_batch_would_be_seen(tmp_path):
    # The planted error: worker 0 handed worker 1's batch moves the result beyond the tolerance.
    model = mlp()
    sim = bitlab.torch.Simulation(model, workers=WORKERS, steps=STEPS, seed=1, out=tmp_path / "p",
                                  optimizer={"name": "adam", "lr": 0.01})
    for step in range(1, STEPS + 1):
        batches = [batch(w, step) for w in range(WORKERS)]
        batches[0] = batches[1]
        sim.run_workers(loss_fn, batches)
        sim.step()
    sim.close()
    planted = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    looped, _, _ = train(mlp(), tmp_path / "l", "with")
    assert (planted - looped).abs().max().item() > 1e-4


def test_batch_norm_runs_the_loop_and_says_why_once(tmp_path):
    via, summary, _ = train(mlp(norm=True), tmp_path / "b", "batched")
    looped, _, _ = train(mlp(norm=True), tmp_path / "l", "with")
    assert torch.equal(via, looped)  # the loop itself: the same bits
    notes = [w for w in summary["warnings"] if w.startswith("run_workers: one worker at a time")]
    assert len(notes) == 1 and "BatchNorm1d" in notes[0], summary["warnings"]


def test_local_steps_run_the_loop(tmp_path):
    opt = {"name": "zero_one_adam", "lr": 0.01, "var_freeze_step": 2, "local_step_scaler": 2,
           "local_step_clipper": 2}
    via, summary, _ = train(mlp(), tmp_path / "b", "batched", opt)
    looped, _, _ = train(mlp(), tmp_path / "l", "with", opt)
    notes = [w for w in summary["warnings"] if "parameters of their own" in w]
    assert len(notes) == 1, summary["warnings"]
    assert (via - looped).abs().max().item() <= 1e-5


def test_route_loop_is_the_loop(tmp_path):
    via, _, _ = train(mlp(), tmp_path / "r", "loop")
    looped, _, _ = train(mlp(), tmp_path / "l", "with")
    assert torch.equal(via, looped)


def test_bad_calls(tmp_path):
    model = mlp()
    sim = bitlab.torch.Simulation(model, workers=WORKERS, steps=STEPS, seed=1, out=tmp_path / "x",
                                  optimizer="adam")
    batches = [batch(w, 1) for w in range(WORKERS)]
    with pytest.raises(bitlab.ConfigError, match="3 batches for 4 workers") as e:
        sim.run_workers(loss_fn, batches[:3])
    assert e.value.field == "batches"
    with pytest.raises(bitlab.ConfigError, match="must be callable"):
        sim.run_workers("loss", batches)
    with pytest.raises(bitlab.ConfigError, match='route = .fast.: must be "batched" or "loop"'):
        sim.run_workers(loss_fn, batches, route="fast")
    with sim.worker(0) as wk:
        loss_fn(model, *batches[0]).backward()
    with pytest.raises(RuntimeError, match=r"after workers \[0\] ran their blocks"):
        sim.run_workers(loss_fn, batches)
    sim.close()
