"""bitlab.torch.Simulation: the run folder, checkpoints, measured compute, and bad input."""

import json
import os

import numpy as np
import pytest
import torch

import bitlab
import bitlab.torch
from conftest import rows_without_wall

STEPS = 12
WORKERS = 4


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def data(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(STEPS + 1, WORKERS, 6, 5, generator=g), torch.randn(
        STEPS + 1, WORKERS, 6, 2, generator=g)


def train(sim, model, x, y, first=1, last=None):
    last = last or sim.steps
    for step in range(first, last + 1):
        for w in range(sim.workers):
            with sim.worker(w) as wk:
                loss = torch.nn.functional.mse_loss(model(x[step, w]), y[step, w])
                loss.backward()
                wk.loss = loss.item()
        sim.step()


def simulation(model, tmp_path, name="run", **kw):
    options = dict(workers=WORKERS, steps=STEPS, seed=1,
                   optimizer={"name": "onebit_adam", "lr": 0.01, "freeze_step": 4},
                   out=tmp_path / name)
    options.update(kw)
    return bitlab.torch.Simulation(model, **options)


def test_run_folder_is_the_standard_one(tmp_path, cli):
    model = make_model()
    x, y = data()
    before = [p.detach().clone() for p in model.parameters()]
    evaluate = lambda m: {"eval_mse": torch.nn.functional.mse_loss(m(x[0, 0]), y[0, 0]).item()}
    sim = simulation(model, tmp_path, network={"preset": "ethernet_40g_v100x4"},
                     evaluate=evaluate, eval_every=4)
    train(sim, model, x, y)
    summary = sim.close()
    assert summary["status"] == "completed" and summary["steps_completed"] == STEPS
    folder = tmp_path / "run"
    for name in ("config.json", "manifest.json", "metrics.csv", "comm_log.csv", "summary.json"):
        assert (folder / name).exists(), name
    config = json.loads((folder / "config.json").read_text())
    assert config["problem"]["tensors"] == [{"name": n, "shape": list(p.shape)}
                                            for n, p in model.named_parameters()]
    m = sim.metrics
    assert list(m["step"]) == list(range(1, STEPS + 1))
    assert m["eval_mse"].notna().sum() == STEPS // 4 and m["sim_time_s"].notna().all()
    assert set(m["phase"]) == {"warmup", "compressed"}
    # the parameters changed in place, and the model owns them again after close()
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))
    model(x[0, 0]).sum().backward()
    # the CLI's tools read the folder
    for args in (["runs", tmp_path], ["recost", folder, "--network", "infiniband_qdr_v100x8",
                                      "--label", "ib"]):
        done = cli(*args)
        assert done.returncode == 0, (args, done.stderr)


def test_same_seed_same_bits_and_threads_do_not_matter(tmp_path):
    x, y = data()
    outs = []
    for k, threads in enumerate((1, 2)):
        model = make_model()
        sim = simulation(model, tmp_path, name=f"r{k}", threads=threads)
        train(sim, model, x, y)
        sim.close()
        outs.append([rows_without_wall(tmp_path / f"r{k}" / f) for f in ("metrics.csv",
                                                                          "comm_log.csv")])
    assert outs[0] == outs[1]


def test_checkpoint_and_resume_equal_an_uninterrupted_run(tmp_path):
    x, y = data()
    model = make_model()
    sim = simulation(model, tmp_path, name="whole")
    train(sim, model, x, y)
    sim.close()
    model = make_model()
    sim = simulation(model, tmp_path, name="cut", checkpoint_every=3)
    train(sim, model, x, y, last=7)
    assert sim.close()["status"] == "interrupted"  # closed early: resumable
    fresh = make_model(seed=99)  # the checkpoint brings the parameters back
    sim = bitlab.torch.Simulation.resume(fresh, tmp_path / "cut")
    assert sim.steps_done == 7
    train(sim, fresh, x, y, first=sim.steps_done + 1)
    assert sim.close()["status"] == "completed"
    for f in ("metrics.csv", "comm_log.csv"):
        assert rows_without_wall(tmp_path / "whole" / f) == rows_without_wall(tmp_path / "cut" / f)


def test_resume_refuses_another_model(tmp_path):
    x, y = data()
    model = make_model()
    sim = simulation(model, tmp_path, name="cut", checkpoint_every=2)
    train(sim, model, x, y, last=3)
    sim.close()
    other = torch.nn.Sequential(torch.nn.Linear(5, 9), torch.nn.Tanh(), torch.nn.Linear(9, 2))
    with pytest.raises(bitlab.ConfigError, match="problem.tensors"):
        bitlab.torch.Simulation.resume(other, tmp_path / "cut")


def test_measured_compute_prices_the_blocks(tmp_path):
    x, y = data()
    model = make_model()
    sim = simulation(model, tmp_path, compute="measured",
                     network={"preset": "ethernet_40g_v100x4"})
    train(sim, model, x, y)
    s = sim.close()
    assert (sim.metrics["compute_s"] > 0).all()
    assert any("measured" in w for w in s["warnings"])
    with pytest.raises(bitlab.ConfigError, match="needs a network"):
        simulation(make_model(), tmp_path, name="x", compute="measured")


def test_divergence_ends_the_run(tmp_path):
    model = make_model()
    x, y = data()
    sim = simulation(model, tmp_path)
    go_on = True
    for step in range(1, STEPS + 1):
        for w in range(WORKERS):
            with sim.worker(w) as wk:
                torch.nn.functional.mse_loss(model(x[step, w]), y[step, w]).backward()
                # a loss past diverge_loss_factor (100) x the first step's at step 3
                wk.loss = 1.0 if step < 3 else 1e6
        go_on = sim.step()
        if not go_on:
            break
    assert not go_on and sim.status == "diverged" and sim.steps_done == 3
    assert sim.close()["status"] == "diverged"
    with pytest.raises(RuntimeError, match="closed"):
        sim.step()


class Vector(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.ones(4))


@pytest.mark.parametrize("name, freeze", [("onebit_adam", "freeze_step"),
                                          ("zero_one_adam", "var_freeze_step")])
@pytest.mark.parametrize("planted", [True, False])
def test_divergence_hint_names_the_frozen_variance_below_eps(tmp_path, name, freeze, planted):
    """Planted: coordinates 2 and 3 see no gradient during the warm-up, so their frozen
    sqrt(v) is 0 < eps; once they do, their momentum divided by about eps blows the loss
    up, and the hint says so with the share. Unplanted, the same run completes."""
    model = Vector()
    sim = bitlab.torch.Simulation(model, workers=2, steps=30, seed=1,
                                  optimizer={"name": name, "lr": 0.01, freeze: 5},
                                  out=tmp_path / "run")
    for step in range(1, 31):
        for w in range(2):
            with sim.worker(w) as wk:
                loss = (model.p ** 2).sum()
                loss.backward()
                if planted and step <= 5:
                    model.p.grad[2:] = 0
                wk.loss = loss.item()
        if not sim.step():
            break
    summary = sim.close()
    if not planted:
        assert summary["status"] == "completed"
        return
    assert summary["status"] == "diverged"
    hint = summary["divergence"]["hint"]
    assert hint.startswith("likely cause: 50 % of the coordinates (2 of 4) had sqrt(v) < "
                           "eps = 1e-08 in the variance frozen at step 5"), hint
    assert "raise optimizer.eps" in hint and "otherwise try a smaller optimizer.lr" in hint


# -- bad input: each a clear exception naming the parameter and the rule ----------------------

def one_step_with(tmp_path, mutate, name="bad"):
    """Runs worker 0's block with `mutate(model)` after backward; returns the raised error."""
    model = make_model()
    x, y = data()
    sim = simulation(model, tmp_path, name=name)
    with pytest.raises(Exception) as e:
        with sim.worker(0):
            torch.nn.functional.mse_loss(model(x[1, 0]), y[1, 0]).backward()
            mutate(model)
    return e.value, sim


@pytest.mark.parametrize("mutate, rule", [
    (lambda m: setattr(m[2].bias, "grad", None), "must have a gradient"),
    # torch keeps .grad in its parameter's dtype on assignment; .data slips past that
    (lambda m: setattr(m[0].weight.grad, "data", m[0].weight.grad.data.double()),
     "must be torch.float32"),
    (lambda m: setattr(m[0].weight, "grad", m[0].weight.grad.t().contiguous().t()),
     "must be contiguous"),
], ids=["missing", "float64", "non-contiguous"])
def test_bad_gradients(tmp_path, mutate, rule):
    err, sim = one_step_with(tmp_path, mutate)
    assert isinstance(err, bitlab.GradientError), err
    assert err.rule == rule and err.worker == 0 and err.field in ("0.weight", "2.bias")
    assert err.field in str(err)
    # the worker did not count: it can run again
    sim.close()


def test_half_gradient_is_refused(tmp_path):
    def half(m):
        m[0].weight.grad.data = m[0].weight.grad.data.half()
    err, _ = one_step_with(tmp_path, half)
    assert isinstance(err, bitlab.GradientError) and "refused, not converted" in str(err)


def test_nan_gradient_fails_the_run_and_leaves_no_complete_folder(tmp_path):
    model = make_model()
    x, y = data()
    sim = simulation(model, tmp_path, name="nan")
    train(sim, model, x, y, last=2)
    # Refused as worker 2's block ends (bitlab takes each gradient then, checked
    # in the same pass), naming the worker, the parameter and the element.
    with pytest.raises(bitlab.GradientError,
                       match=r"step 3, worker 2, parameter '0.weight': gradient element 8 is nan") as e:
        for w in range(WORKERS):
            with sim.worker(w):
                torch.nn.functional.mse_loss(model(x[3, w]), y[3, w]).backward()
                if w == 2:
                    model[0].weight.grad[1, 3] = float("nan")
    assert e.value.field == "0.weight" and e.value.worker == 2 and e.value.rule == "must be finite"
    # The parts come from the core's error as data: element 8 of the flattened [., 5] weight
    assert e.value.element == 8 and e.value.value == "nan"
    with pytest.raises(RuntimeError, match="closed"):
        sim.step()
    summary = json.loads((tmp_path / "nan" / "summary.json").read_text())
    assert summary["status"] == "failed" and "0.weight" in summary["failure"]
    assert summary["failure"].startswith("GradientError")
    assert len(sim.metrics) == 2  # the whole steps only


def test_protocol_errors(tmp_path):
    model = make_model()
    x, y = data()
    sim = simulation(model, tmp_path)
    with sim.worker(0):
        torch.nn.functional.mse_loss(model(x[1, 0]), y[1, 0]).backward()
    with pytest.raises(RuntimeError, match="entered twice"):
        with sim.worker(0):
            pass
    with pytest.raises(RuntimeError, match=r"before workers \[1, 2, 3\]"):
        sim.step()
    with pytest.raises(ValueError, match="must be an int in"):
        with sim.worker(WORKERS):
            pass
    with pytest.raises(RuntimeError, match="do not nest"):
        with sim.worker(1):
            with sim.worker(2):
                pass
    sim.close()


def test_model_that_changes_shape_is_refused(tmp_path):
    def grow(m):
        m[2].bias.data = torch.zeros(3)
        m[2].bias.grad = torch.zeros(3)
    err, _ = one_step_with(tmp_path, grow)
    assert isinstance(err, bitlab.GradientError) and "changed shape" in str(err)


@pytest.mark.parametrize("model, match", [
    (lambda: make_model().double(), "must be torch.float32"),
    (lambda: torch.nn.ReLU(), "no parameter that requires grad"),
    (lambda: "not a model", "must be a torch.nn.Module"),
])
def test_bad_models(tmp_path, model, match):
    with pytest.raises(bitlab.ConfigError, match=match):
        simulation(model(), tmp_path)
    assert not (tmp_path / "run").exists()


def test_bad_options_leave_no_folder(tmp_path):
    with pytest.raises(bitlab.ConfigError) as e:
        simulation(make_model(), tmp_path, optimizer={"name": "onebit_adam", "freeze_stp": 3})
    assert e.value.field == "optimizer.freeze_stp" and "did you mean" in str(e.value)
    with pytest.raises(bitlab.ConfigError, match="workers"):
        simulation(make_model(), tmp_path, workers=0)
    assert not (tmp_path / "run").exists()


# -- a property: the order in which the workers run their blocks changes no bit ---------------

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_IN_ORDER = {}


def _run_in_order(folder, order):
    x, y = data()
    model = make_model()
    sim = simulation(model, folder, name="o", optimizer={"name": "loco", "lr": 0.01,
                                                          "node_size": 2})
    for step in range(1, STEPS + 1):
        for w in order:
            with sim.worker(w) as wk:
                loss = torch.nn.functional.mse_loss(model(x[step, w]), y[step, w])
                loss.backward()
                wk.loss = loss.item()
        sim.step()
    sim.close()
    return [rows_without_wall(folder / "o" / f) for f in ("metrics.csv", "comm_log.csv")]


@settings(max_examples=6, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(list(range(WORKERS))))
def test_worker_order_changes_no_bit(tmp_path_factory, order):
    if "ref" not in _IN_ORDER:
        _IN_ORDER["ref"] = _run_in_order(tmp_path_factory.mktemp("ref"), list(range(WORKERS)))
    assert _run_in_order(tmp_path_factory.mktemp("perm"), order) == _IN_ORDER["ref"]


def test_a_deepspeed_config_drives_the_optimizer(tmp_path):
    x, y = data()
    model = make_model()
    ds = {"train_batch_size": 24, "train_micro_batch_size_per_gpu": 6,
          "optimizer": {"type": "OneBitAdam", "params": {"lr": 0.01, "freeze_step": 100}}}
    sim = bitlab.torch.Simulation(model, workers=WORKERS, steps=STEPS, deepspeed=ds,
                                  optimizer={"freeze_step": 4}, out=tmp_path / "ds")
    train(sim, model, x, y)
    sim.close()
    assert sim.config["optimizer"]["name"] == "onebit_adam"
    assert sim.config["optimizer"]["freeze_step"] == 4  # the explicit argument wins
    assert sim.config["optimizer"]["bias_correction"] is False  # DeepSpeed's 1-bit Adam never corrects
    with pytest.raises(bitlab.ConfigError, match="optimizer"):
        bitlab.torch.Simulation(make_model(), workers=2, steps=2, out=tmp_path / "none")


def test_sparse_gradient_is_refused(tmp_path):
    # An embedding with sparse=True makes a sparse .grad. (A gradient on another
    # device cannot be made here: torch itself keeps .grad on its parameter's
    # device, and parameters must be on the CPU, which test_bad_models checks.)
    model = torch.nn.Embedding(10, 4, sparse=True)
    sim = bitlab.torch.Simulation(model, workers=2, steps=2, optimizer="adam",
                                  out=tmp_path / "sparse")
    with pytest.raises(bitlab.GradientError, match="must be dense") as e:
        with sim.worker(0):
            model(torch.tensor([1, 2])).sum().backward()
    assert e.value.field == "weight"
    sim.close()


# -- memory: a bridge run holds what `bitlab run` holds, and is refused up front otherwise ---------

def test_a_run_that_cannot_fit_is_refused_with_the_figure(tmp_path):
    # LoCo reads per-worker gradients, so it holds a row per worker (and its error
    # buffers): 200 000 workers of a 1 M-parameter model need terabytes, refused before
    # anything is allocated or written. Adam on the same model holds the mean's tree rows
    # only (log2 n + 1 = 19 rows) and starts.
    model = torch.nn.Linear(1000, 1000)
    with pytest.raises(bitlab.ConfigError,
                       match=r"cluster.workers = 200000 workers of d = 1001000 parameters need "
                             r"at least [\d.]+ TB \(4-byte floats: one gradient row per worker"):
        bitlab.torch.Simulation(model, workers=200000, steps=2, optimizer="loco",
                                out=tmp_path / "loco")
    assert not (tmp_path / "loco").exists()
    sim = bitlab.torch.Simulation(model, workers=200000, steps=2, optimizer="adam",
                                  out=tmp_path / "adam")
    assert (tmp_path / "adam" / "config.json").exists()
    sim.close()


def test_a_refused_last_gradient_is_raised_by_step_and_by_close(tmp_path):
    # bitlab takes each gradient on a thread of its own while the next worker runs (when
    # torch leaves a core idle), so a refusal surfaces at the next hand-in, or, for the last
    # worker, at step() or close(); inline (torch on every core) it surfaces at once. Both.
    x, y = data()
    threads = torch.get_num_threads()
    for torch_threads, end in ((1, "step"), (1, "close"), (os.cpu_count(), "step")):
        torch.set_num_threads(torch_threads)
        model = make_model()
        sim = simulation(model, tmp_path, name=f"last-{end}-{torch_threads}")
        with pytest.raises(bitlab.GradientError, match=r"worker 3, parameter '2.bias'.*is inf") as e:
            hand_in_last(sim, model, x, y)  # inline: raised here, as the block ends
            sim.step() if end == "step" else sim.close()
        assert e.value.worker == WORKERS - 1 and e.value.field == "2.bias"
        summary = json.loads((tmp_path / f"last-{end}-{torch_threads}" / "summary.json").read_text())
        assert summary["status"] == "failed" and "2.bias" in summary["failure"]
    torch.set_num_threads(threads)


def hand_in_last(sim, model, x, y):
    for w in range(WORKERS):
        with sim.worker(w):
            torch.nn.functional.mse_loss(model(x[1, w]), y[1, w]).backward()
            if w == WORKERS - 1:
                model[2].bias.grad[0] = float("inf")


def test_backend_choice(tmp_path, monkeypatch):
    from bitlab import _launch
    assert _launch.launched_ranks({"OMPI_COMM_WORLD_SIZE": "4"}) == 4
    assert _launch.launched_ranks({"PMI_SIZE": "2"}) == 2
    assert _launch.launched_ranks({"SLURM_NTASKS": "8"}) == 1  # sbatch's own shell: no step
    assert _launch.launched_ranks({"SLURM_NTASKS": "8", "SLURM_STEP_ID": "0"}) == 8
    model = make_model()
    with pytest.raises(bitlab.ConfigError, match='backend = .gpu.: must be "auto", "sim" or "mpi"') as e:
        simulation(model, tmp_path, name="b1", backend="gpu")
    assert e.value.field == "backend"
    for key in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE",
                "SLURM_STEP_ID"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(bitlab.ConfigError, match="not started by an MPI launcher"):
        simulation(model, tmp_path, name="b2", backend="mpi")
    sim = simulation(model, tmp_path, name="b3", backend="sim")
    assert sim.ranks == 1 and list(sim.local_workers) == list(range(WORKERS))
    sim.close()


def test_a_quiet_simulation_still_says_what_changes_the_answer(tmp_path, capfd):
    # quiet=True (the default) keeps progress and notes off stderr, not the warning that the
    # run never compresses: it changes what the run computes.
    sim = bitlab.torch.Simulation(make_model(), workers=2, steps=3, out=tmp_path / "q",
                                  optimizer={"name": "onebit_adam", "freeze_step": 10})
    err = capfd.readouterr().err
    assert "optimizer.freeze_step = 10 is not below steps = 3: the run never compresses" in err
    assert sim.close()["status"] == "interrupted"
