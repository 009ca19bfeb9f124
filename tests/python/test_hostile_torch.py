"""Hostile use of bitlab.torch.Simulation (docs/python.md, "What bitlab refuses"): bad options,
worker indices, resume folders, evaluate functions, write failures, gradient forms
and runs that cannot fit each end in the documented exception, and the valid forms
in a correct result. A tiny model and 2-4 steps per case keep the file fast."""

import json
import os
import re

import numpy as np
import pytest
import torch

import bitlab
import bitlab.torch

WORKERS = 2


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))


def batch(step, w):
    g = torch.Generator().manual_seed(1000 * step + w)
    return torch.randn(5, 3, generator=g), torch.randn(5, 1, generator=g)


def simulation(model, tmp_path, name="run", **kw):
    options = dict(workers=WORKERS, steps=4, seed=1, optimizer={"name": "adam", "lr": 0.05},
                   out=tmp_path / name)
    options.update(kw)
    return bitlab.torch.Simulation(model, **options)


def one_step(sim, model, step=None):
    step = sim.steps_done + 1 if step is None else step
    for w in sim.local_workers:
        with sim.worker(w) as wk:
            x, y = batch(step, w)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            wk.loss = loss.item()
    return sim.step()


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


# -- 1. the options, checked before any C++ call ---------------------------------------------

BAD_OPTIONS = [
    ("threads", 10**6), ("threads", 1025), ("threads", -1), ("threads", 2.5), ("threads", True),
    ("threads", "abc"), ("threads", None), ("threads", "2"),
    ("checkpoint_every", -1), ("checkpoint_every", 1.5), ("checkpoint_every", 2**70),
    ("checkpoint_every", True),
    ("workers", 0), ("workers", -3), ("workers", 2**20 + 1), ("workers", 2.0), ("workers", True),
    ("workers", "2"), ("workers", None),
    ("steps", 0), ("steps", 2**32 + 1), ("steps", 1.5), ("steps", False), ("steps", "4"),
    ("seed", -1), ("seed", 2**64), ("seed", 1.0), ("seed", True), ("seed", "1"), ("seed", None),
    ("out", 5), ("out", "a\0b"), ("results", None), ("results", ""), ("quiet", "yes"),
]


@pytest.mark.parametrize("name,value", BAD_OPTIONS, ids=repr)
def test_bad_options_are_config_errors_naming_them(name, value, tmp_path):
    with pytest.raises(bitlab.ConfigError) as e:
        simulation(make_model(), tmp_path, **{name: value})
    assert e.value.field == name and e.value.rule, e.value.message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", [np.int64(2), np.int32(2), torch.tensor(2)], ids=repr)
def test_any_index_integer_is_accepted(value, tmp_path):
    sim = simulation(make_model(), tmp_path, workers=value, steps=np.int64(2), seed=np.uint64(1),
                     threads=np.int16(0), checkpoint_every=np.int8(1))
    assert sim.workers == 2 and sim.steps == 2
    sim.close()


def test_the_largest_seed_is_accepted(tmp_path):
    sim = simulation(make_model(), tmp_path, seed=2**64 - 1)
    assert sim.config["seed"] == 2**64 - 1
    sim.close()


@pytest.mark.parametrize("optimizer,field", [
    ({"name": "adam", "lr": {1, 2}}, "optimizer.lr"), ({"name": "adam", "lr": float("nan")},
                                                        "optimizer.lr"),
    ({"name": "adam", "betas": object()}, "optimizer.betas"), ({"name": "adam", (1, 2): 3}, None),
    (["adam"], "optimizer"), (5, "optimizer"),
], ids=repr)
def test_optimizer_values_json_cannot_hold(optimizer, field, tmp_path):
    with pytest.raises(bitlab.ConfigError) as e:
        simulation(make_model(), tmp_path, optimizer=optimizer)
    if field:
        assert e.value.field == field, e.value.message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("network", [{"preset": {1}}, {"preset": float("inf")},
                                     {"preset": "ethernet_40g_v100x4", "x": b"1"}], ids=repr)
def test_network_values_json_cannot_hold(network, tmp_path):
    with pytest.raises(bitlab.ConfigError) as e:
        simulation(make_model(), tmp_path, network=network)
    assert e.value.field.startswith("network.")


@pytest.mark.parametrize("index", [True, False, 1.0, "0", None, -1, WORKERS, 2**70,
                                   np.float64(0), np.bool_(True)], ids=repr)
def test_bad_worker_indices(index, tmp_path):
    sim = simulation(make_model(), tmp_path)
    with pytest.raises(bitlab.ConfigError) as e:
        with sim.worker(index):
            pass
    assert e.value.field == "worker" and "[0, 2)" in e.value.rule
    sim.close()


@pytest.mark.parametrize("index", [np.int64(1), torch.tensor(1), np.uint8(1)], ids=repr)
def test_index_integers_are_worker_indices(index, tmp_path):
    model = make_model()
    sim = simulation(model, tmp_path)
    with sim.worker(0):
        model(batch(1, 0)[0]).sum().backward()
    with sim.worker(index):
        model(batch(1, 1)[0]).sum().backward()
    assert sim.step() and sim.steps_done == 1
    sim.close()


# -- 3. resume through bitlab's reader ------------------------------------------------------------

def finished_folder(tmp_path, steps_run=2, **kw):
    model = make_model()
    sim = simulation(model, tmp_path, checkpoint_every=1, **kw)
    for _ in range(steps_run):
        one_step(sim, model)
    sim.close()
    return tmp_path / "run"


@pytest.mark.parametrize("content", ["not json", "[1, 2]", "{}", '{"problem": {"name": "external"}}',
                                     "", '{"cluster": 5}', "null"], ids=repr)
def test_resume_of_a_folder_with_a_bad_config(content, tmp_path):
    # `bitlab run --resume` gives the same messages (exit 2); each names the folder
    folder = finished_folder(tmp_path)
    (folder / "config.json").write_text(content)
    with pytest.raises(bitlab.ConfigError) as e:
        bitlab.torch.Simulation.resume(make_model(), folder)
    assert str(folder) in e.value.message


@pytest.mark.parametrize("case", ["missing", "empty", "no-checkpoint", "completed", "cli-run",
                                  "not-a-path"])
def test_resume_refusals(case, tmp_path):
    if case == "missing":
        folder = tmp_path / "nothing"
    elif case == "empty":
        folder = tmp_path
    elif case == "no-checkpoint":
        model = make_model()
        sim = simulation(model, tmp_path)
        one_step(sim, model)
        sim.close()
        folder = tmp_path / "run"
    elif case == "completed":
        folder = finished_folder(tmp_path, steps_run=4)
    elif case == "cli-run":
        folder = tmp_path / "cli"
        bitlab.run({"steps": 3, "problem": {"name": "quadratic", "dim": 4},
                    "optimizer": {"name": "sgd"}}, out=folder, checkpoint_every=1)
        os.remove(folder / "summary.json")  # as if killed: resumable by `bitlab run --resume`
    else:
        folder = 17
    with pytest.raises(bitlab.ConfigError):
        bitlab.torch.Simulation.resume(make_model(), folder)


def test_resume_of_a_good_folder_still_works(tmp_path):
    folder = finished_folder(tmp_path, steps_run=2)
    model = make_model(seed=5)
    sim = bitlab.torch.Simulation.resume(model, folder)
    assert sim.steps_done == 2 and sim.status == "running"
    while one_step(sim, model):
        pass
    assert sim.close()["status"] == "completed"


# -- 4. evaluate is a contract ----------------------------------------------------------------------

BAD_EVAL_RETURNS = [
    ("abc", "must return a dict"), (None, "must return a dict"), ([1.0], "must return a dict"),
    ({"acc": "x"}, "must be a number"), ({"acc": None}, "must be a number"),
    ({"acc": torch.tensor([1.0, 2.0])}, "must be a number"), ({"acc": [1.0]}, "must be a number"),
    ({"acc": True}, "must be a number"), ({"acc": np.bool_(False)}, "must be a number"),
    ({"acc": 1j}, "must be a number"), ({"acc": np.array([1.0, 2.0])}, "must be a number"),
    ({"acc": float("nan")}, "must be finite"), ({"acc": float("inf")}, "must be finite"),
    ({"acc": np.float32("nan")}, "must be finite"), ({"acc": torch.tensor(float("-inf"))},
                                                      "must be finite"),
    ({"train_loss": 1.0}, "built-in column"), ({"step": 1.0}, "built-in column"),
    ({"wall_s": 1.0}, "built-in column"), ({1: 1.0}, "csv-safe"), ({"a,b": 1.0}, "csv-safe"),
    ({"": 1.0}, "csv-safe"),
]


@pytest.mark.parametrize("returned,rule", BAD_EVAL_RETURNS, ids=repr)
def test_bad_evaluate_returns_when_made(returned, rule, tmp_path):
    with pytest.raises(bitlab.ConfigError) as e:
        simulation(make_model(), tmp_path, evaluate=lambda m: returned, eval_every=1)
    assert rule in e.value.rule, e.value.message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("returned,rule", BAD_EVAL_RETURNS[3:15], ids=repr)
def test_bad_evaluate_returns_at_a_step_name_the_key_and_step(returned, rule, tmp_path):
    model = make_model()
    calls = []

    def evaluate(m):
        calls.append(1)
        return {"acc": 0.5} if len(calls) < 2 else returned
    sim = simulation(model, tmp_path, evaluate=evaluate, eval_every=1)
    with pytest.raises(bitlab.ConfigError) as e:
        one_step(sim, model)
    assert "'acc'" in e.value.message and "at step 1" in e.value.message
    assert rule in e.value.rule
    assert sim.summary["status"] == "failed"


@pytest.mark.parametrize("evaluate", [lambda: {"acc": 1.0}, lambda m, extra: {"acc": 1.0}, 5,
                                      "evaluate"], ids=repr)
def test_evaluate_must_be_callable_with_the_model(evaluate, tmp_path):
    with pytest.raises(bitlab.ConfigError) as e:
        simulation(make_model(), tmp_path, evaluate=evaluate)
    assert e.value.field == "evaluate"


@pytest.mark.parametrize("name", [torch.ones(2), {1}, 5, ["a"]], ids=repr)
def test_a_name_that_is_no_string_is_refused(name, tmp_path):
    with pytest.raises(bitlab.ConfigError) as e:
        bitlab.torch.Simulation(make_model(), workers=2, steps=2, optimizer="adam", name=name,
                                results=tmp_path)
    assert e.value.field == "name"


@pytest.mark.parametrize("columns,rule", [
    ("acc", "list of str"), (["acc", "acc"], "repeat"), (["train_loss"], "built-in"),
    ([3], "csv-safe"), (["a\nb"], "csv-safe"), ({"acc"}, "list of str"),
], ids=repr)
def test_bad_eval_columns(columns, rule, tmp_path):
    with pytest.raises(bitlab.ConfigError) as e:
        simulation(make_model(), tmp_path, evaluate=lambda m: {"acc": 1.0}, eval_columns=columns)
    assert rule in e.value.rule


@pytest.mark.parametrize("value", [0.5, 1, np.float32(0.5), np.float64(0.5), np.int64(1),
                                   torch.tensor(0.5), torch.tensor([0.5])], ids=repr)
def test_numbers_of_every_kind_are_written(value, tmp_path):
    model = make_model()
    sim = simulation(model, tmp_path, steps=2, evaluate=lambda m: {"acc": value}, eval_every=1)
    while one_step(sim, model):
        pass
    sim.close()
    assert list(sim.metrics["acc"]) == [float(value)] * 2


class Planted(Exception):
    pass


@pytest.mark.parametrize("raised", [Planted, KeyboardInterrupt])
def test_an_exception_in_evaluate_leaves_the_last_written_step(raised, tmp_path):
    model = make_model()
    fail_at = {"step": 3}

    def evaluate(m):
        if sim_ref and sim_ref[0].steps_done == fail_at["step"]:
            raise raised("planted")
        return {"acc": float(m[0].weight.sum())}
    sim_ref = []
    sim = simulation(model, tmp_path, evaluate=evaluate, eval_every=1, checkpoint_every=1)
    sim_ref.append(sim)
    one_step(sim, model)
    one_step(sim, model)
    after_two = flat(model)
    with pytest.raises(raised):
        one_step(sim, model)
    # The model holds step 2's parameters: the last step metrics.csv holds.
    assert torch.equal(flat(model), after_two)
    assert list(sim.metrics["step"]) == [1, 2]
    # summary.json could not be written either (the limit held while the run ended): what
    # is there never reads completed
    assert sim.summary.get("status") in (None, "failed")
    # ... and the run resumes from its checkpoint to the same end as an uninterrupted run.
    fail_at["step"] = None
    model = make_model(seed=3)
    sim = bitlab.torch.Simulation.resume(model, tmp_path / "run", evaluate=evaluate)
    sim_ref[0] = sim
    assert sim.steps_done == 2
    while one_step(sim, model):
        pass
    sim.close()
    ref_model = make_model()
    ref = simulation(ref_model, tmp_path, name="ref", evaluate=lambda m: {
        "acc": float(m[0].weight.sum())}, eval_every=1)
    while one_step(ref, ref_model):
        pass
    ref.close()
    assert torch.equal(flat(model), flat(ref_model))
    drop = lambda df: df.drop(columns=["wall_s"]).to_dict("list")
    assert drop(sim.metrics) == drop(ref.metrics)


@pytest.mark.parametrize("reentry", ["step", "worker", "run_workers", "close"])
def test_evaluate_may_not_reenter_the_run(reentry, tmp_path):
    model = make_model()
    holder = []

    def evaluate(m):
        if holder:
            sim = holder[0]
            if reentry == "step":
                sim.step()
            elif reentry == "worker":
                with sim.worker(0):
                    pass
            elif reentry == "run_workers":
                sim.run_workers(lambda mm, x: mm(x).sum(), [torch.ones(1, 3)] * WORKERS)
            else:
                sim.close()
        return {"acc": 0.0}
    sim = simulation(model, tmp_path, evaluate=evaluate, eval_every=1)
    holder.append(sim)
    with pytest.raises(RuntimeError, match="inside evaluate"):
        one_step(sim, model)


@pytest.mark.parametrize("returned", [None, 2.5, "x", (1,), torch.ones(2), torch.tensor(1.0)],
                         ids=repr)
@pytest.mark.parametrize("route", ["batched", "loop"])
def test_run_workers_refuses_a_loss_that_is_no_scalar_tensor(returned, route, tmp_path):
    model = make_model()
    sim = simulation(model, tmp_path)
    batches = [batch(1, w) for w in range(WORKERS)]
    if route == "batched" and isinstance(returned, torch.Tensor) and returned.numel() == 1:
        # one pass gives a loss the parameters do not enter a zero gradient (docs/python.md)
        assert sim.run_workers(lambda m, x, y: returned, batches, route=route) == [1.0, 1.0]
        assert sim.step()
    else:
        with pytest.raises(bitlab.ConfigError) as e:
            sim.run_workers(lambda m, x, y: returned, batches, route=route)
        assert e.value.field == "loss_fn" and "worker 0" in e.value.message
    sim.close()


# -- 5. no silent failure ------------------------------------------------------------------------

def test_status_is_running_until_the_run_ends(tmp_path):
    model = make_model()
    sim = simulation(model, tmp_path, steps=2)
    assert sim.status == "running"
    one_step(sim, model)
    assert sim.status == "running"
    assert not one_step(sim, model)
    assert sim.status == "completed"
    assert sim.close()["status"] == "completed" and sim.status == "completed"


def test_closed_early_reads_interrupted(tmp_path):
    model = make_model()
    sim = simulation(model, tmp_path)
    one_step(sim, model)
    sim.close()
    assert sim.status == "interrupted"


def test_a_write_error_in_step_raises_oserror_naming_the_file(tmp_path):
    # A full disk, portably (as tests/test_cli.cpp): comm_log.csv is a link to /dev/full,
    # where every write fails with ENOSPC.
    if not os.path.exists("/dev/full"):
        pytest.skip("this system has no /dev/full")
    out = tmp_path / "run"
    out.mkdir()
    file = "comm_log.csv"
    os.symlink("/dev/full", out / file)
    model = make_model()
    sim = simulation(model, tmp_path)
    with pytest.raises(OSError, match=re.escape(str(out / file))):
        one_step(sim, model)
    assert sim.status == "failed"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and "No space left on device" in summary["failure"]
    with pytest.raises(RuntimeError, match="closed"):
        one_step(sim, model)


def test_a_write_error_at_a_later_step_keeps_the_whole_steps(tmp_path):
    # A file size limit stands in for a full disk at step 3 (Python ignores SIGXFSZ, so the
    # write fails with EFBIG): step() raises OSError naming the file; metrics.csv keeps
    # steps 1 and 2 whole.
    import resource
    model = make_model()
    sim = simulation(model, tmp_path)
    one_step(sim, model)
    one_step(sim, model)
    out = tmp_path / "run"
    limit = max(os.path.getsize(out / f) for f in ("metrics.csv", "comm_log.csv")) + 1
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        with pytest.raises(OSError, match=r"(metrics|comm_log)\.csv") as e:
            one_step(sim, model)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert str(out) in str(e.value) and sim.status == "failed"
    assert list(sim.metrics["step"]) == [1, 2]
    # summary.json could not be written either (the limit held while the run ended): what
    # is there never reads completed
    assert sim.summary.get("status") in (None, "failed")


def test_a_gradient_with_a_graph_is_refused_by_name(tmp_path):
    model = make_model()
    sim = simulation(model, tmp_path)
    with pytest.raises(bitlab.GradientError, match="graph attached") as e:
        with sim.worker(0):
            x, y = batch(1, 0)
            torch.nn.functional.mse_loss(model(x), y).backward(create_graph=True)
    assert e.value.field == "0.weight" and e.value.worker == 0
    sim.close()


def test_a_sparse_gradient_is_refused_by_name(tmp_path):
    model = torch.nn.Embedding(10, 4, sparse=True)
    sim = bitlab.torch.Simulation(model, workers=2, steps=2, optimizer="adam",
                                  out=tmp_path / "sparse")
    with pytest.raises(bitlab.GradientError, match="sparse") as e:
        with sim.worker(0):
            model(torch.tensor([1, 2])).sum().backward()
    assert e.value.rule == "must be dense"
    sim.close()


def test_parameters_sharing_memory_through_a_view_are_refused(tmp_path):
    model = torch.nn.Linear(4, 4)
    base = torch.zeros(8)
    model.weight = torch.nn.Parameter(torch.zeros(4, 4))
    model.a = torch.nn.Parameter(base)
    model.b = torch.nn.Parameter(base[4:])  # a view of a's memory
    with pytest.raises(bitlab.ConfigError, match="share memory") as e:
        simulation(model, tmp_path)
    assert e.value.field == "b" and "'a'" in e.value.message


def test_one_parameter_registered_twice_still_works(tmp_path):
    model = make_model()
    model.tied = model[0].weight  # the same Parameter: named_parameters() lists it once
    sim = simulation(model, tmp_path, steps=1)
    assert not one_step(sim, model)
    sim.close()


@pytest.mark.parametrize("loss", ["abc", [1.0], torch.ones(2), True, {"a": 1}], ids=repr)
def test_bad_worker_losses(loss, tmp_path):
    model = make_model()
    sim = simulation(model, tmp_path)
    with pytest.raises(bitlab.ConfigError) as e:
        with sim.worker(0) as wk:
            model(batch(1, 0)[0]).sum().backward()
            wk.loss = loss
    assert e.value.field == "wk.loss"
    sim.close()


# -- 6. memory: refused up front, with the figure ----------------------------------------------------

def _available_bytes():
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["MemAvailable"].split()[0]) * 1024, int(fields["MemTotal"].split()[0]) * 1024


def test_a_run_larger_than_the_available_memory_is_refused_up_front(tmp_path):
    # LoCo holds a row per worker (and its error buffers). A probe far past the machine's
    # memory gives the bytes per worker from the refusal's own figure (3 significant
    # digits: within 0.5 %); then a run sized to 99 % of the memory available now, below the
    # machine's total, must be refused too: with the 1/16 margin it needs 105 % of it (the
    # 5 % covers the rounding and what other processes free meanwhile). Should the check
    # let it through, an address-space limit makes the allocation fail at once (MemoryError,
    # the test fails) instead of taking the machine's memory.
    model = torch.nn.Linear(256, 256)
    probe = 1 << 20
    with pytest.raises(bitlab.ConfigError) as e:
        bitlab.torch.Simulation(model, workers=probe, steps=2, optimizer="loco",
                                out=tmp_path / "probe")
    number, unit = re.search(r"need at least ([\d.]+) (\w+)", e.value.message).groups()
    scale = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15}[unit]
    per_worker = float(number) * scale / probe
    available, total = _available_bytes()
    workers = int(0.99 * available / per_worker)
    if workers * per_worker * 1.01 > total:
        pytest.skip("this machine's available memory is too close to its total to tell them apart")
    import resource
    with open("/proc/self/status") as f:
        vm = int(next(line for line in f if line.startswith("VmSize:")).split()[1]) * 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), hard))
    try:
        with pytest.raises(bitlab.ConfigError, match="available now") as e:
            bitlab.torch.Simulation(model, workers=workers, steps=2, optimizer="loco",
                                    out=tmp_path / "loco")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert e.value.field == "cluster.workers"
    assert not (tmp_path / "loco").exists()


# -- a property: the options are accepted exactly when the CLI's rules allow them ---------------

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

OPTION_VALUES = st.one_of(st.integers(min_value=-5, max_value=40), st.integers(),
                          st.floats(allow_nan=True), st.booleans(), st.none(),
                          st.text(max_size=3), st.sampled_from([np.int64(3), np.float64(3.0)]))
RULES = {"workers": (1, 2**20), "steps": (1, 2**32), "seed": (0, 2**64 - 1),
         "checkpoint_every": (0, 2**40), "threads": (0, 1024)}


@settings(max_examples=120, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(RULES)), value=OPTION_VALUES)
def test_options_are_accepted_exactly_within_the_rules(name, value, tmp_path_factory):
    low, high = RULES[name]
    valid = (isinstance(value, (int, np.integer)) and not isinstance(value, bool)
             and low <= value <= high)
    if name in ("workers", "steps") and valid and value > 64:
        value = 64  # a valid size, kept small (the rule's top is the checker's own test)
    if name == "threads" and valid and value > 2:
        value = 2   # more threads than this machine's cores only slows the test down
    options = dict(workers=2, steps=2, seed=1, optimizer="sgd",
                   results=tmp_path_factory.mktemp("opt"))
    options[name] = value
    if valid:
        before = torch.get_num_threads()
        sim = bitlab.torch.Simulation(torch.nn.Linear(2, 1), **options)
        sim.close()
        torch.set_num_threads(before)  # the one OpenMP runtime: leave the next tests' count
    else:
        with pytest.raises(bitlab.ConfigError) as e:
            bitlab.torch.Simulation(torch.nn.Linear(2, 1), **options)
        assert e.value.field == name
