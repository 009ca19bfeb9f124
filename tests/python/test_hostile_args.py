"""Hostile arguments to bitlab's Python functions (docs/python.md, "What bitlab refuses"): every bad
argument ends in ConfigError naming the argument (or JSON path), the value and
the rule, before any C++ call; every valid form is accepted. The cases are
small: the whole file runs in a few seconds."""

import json
import math
import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import bitlab
from bitlab import _checks
from conftest import write_json

QUICK = {
    "name": "hostile",
    "seed": 1,
    "steps": 2,
    "problem": {"name": "quadratic", "dim": 8},
    "cluster": {"workers": 2},
    "optimizer": {"name": "sgd", "lr": 0.01},
}


def config_error(call, field=None):
    """Runs ``call``; returns the ConfigError it must raise (naming ``field`` when given)."""
    with pytest.raises(bitlab.ConfigError) as e:
        call()
    if field is not None:
        assert e.value.field == field, e.value.message
    assert e.value.rule and e.value.exit_status == 2
    return e.value


# -- 1. one checker: threads, jobs, checkpoint_every, seed, workers, steps ------------------

BAD_THREADS = [10**6, 1025, -1, 2.5, True, False, "abc", None, "2", 2.0, np.float64(2.0),
               np.bool_(True), [2], 2**70]


@pytest.mark.parametrize("value", BAD_THREADS, ids=repr)
def test_run_refuses_threads(value, tmp_path):
    e = config_error(lambda: bitlab.run(QUICK, out=tmp_path / "r", threads=value), "threads")
    assert "1 to 1024" in e.rule
    assert not (tmp_path / "r").exists()  # refused before anything is made


BAD_CHECKPOINT_EVERY = [-1, 1.5, 2**70, (1 << 40) + 1, "2", True, None]


@pytest.mark.parametrize("value", BAD_CHECKPOINT_EVERY, ids=repr)
def test_run_refuses_checkpoint_every(value, tmp_path):
    e = config_error(lambda: bitlab.run(QUICK, out=tmp_path / "r", checkpoint_every=value),
                     "checkpoint_every")
    assert "2^40" in e.rule


BAD_JOBS = [-1, 10**6, "2", 2.5, True, None, 1025]


@pytest.mark.parametrize("value", BAD_JOBS, ids=repr)
def test_sweep_refuses_jobs(value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = {"name": "s", "base": QUICK, "grid": {"optimizer.lr": [0.01]}}
    config_error(lambda: bitlab.sweep(spec, out=tmp_path / "s", jobs=value), "jobs")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("value", [np.int64(1), np.int32(2), torch.tensor(1), 1], ids=repr)
def test_any_index_integer_is_a_thread_count(value, tmp_path):
    r = bitlab.run(QUICK, out=tmp_path / "r", threads=value, checkpoint_every=np.int64(0))
    assert r.status == "completed"


@pytest.mark.parametrize("name,low,high", [("threads", 0, 1024), ("checkpoint_every", 0, 1 << 40),
                                           ("seed", 0, 2**64 - 1), ("workers", 1, 1 << 20),
                                           ("steps", 1, 1 << 32)])
def test_checker_bounds_are_the_clis(name, low, high):
    check = getattr(_checks, name)
    assert check(low) == low and check(high) == high
    for outside in (low - 1, high + 1):
        config_error(lambda: check(outside), name)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.integers(min_value=-2**80, max_value=2**80), st.floats(allow_nan=True),
                 st.booleans(), st.text(max_size=4), st.none()))
def test_threads_checker_accepts_exactly_the_integers_in_range(value):
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1024
    if ok:
        assert _checks.threads(value) == value
    else:
        config_error(lambda: _checks.threads(value), "threads")


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=-2**70, max_value=2**70))
def test_seed_checker_is_the_uint64_range(value):
    if 0 <= value < 2**64:
        assert _checks.seed(value) == value
    else:
        assert "2^64" in config_error(lambda: _checks.seed(value), "seed").rule


def test_a_seed_past_uint64_is_named_exactly_not_by_its_float_rounding(tmp_path):
    e = config_error(lambda: bitlab.validate(QUICK, seed=2**64), "seed")
    assert "18446744073709551616" in e.message and "e+19" not in e.message


# -- paths, lists, flags ---------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,field", [
    ({"out": 123}, "out"), ({"out": "a\0b"}, "out"), ({"results": None}, "results"),
    ({"results": ""}, "results"), ({"results": 1.5}, "results"), ({"resume": 5}, "resume"),
    ({"resume": ""}, "resume"), ({"quiet": "no"}, "quiet"), ({"quiet": 0}, "quiet"),
    ({"set": "optimizer.lr=0.1"}, "set"), ({"set": [1]}, "set[0]"), ({"unset": [None]}, "unset[0]"),
    ({"unset": "optimizer.lr"}, "unset"),
], ids=repr)
def test_run_refuses_bad_paths_lists_and_flags(kwargs, field, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config_error(lambda: bitlab.run(QUICK, **kwargs), field)


@pytest.mark.parametrize("kwargs,field", [({"out": 5}, "out"), ({"resume": "yes"}, "resume"),
                                          ({"quiet": None}, "quiet"), ({"results": b""}, "results")],
                         ids=repr)
def test_sweep_refuses_bad_paths_and_flags(kwargs, field, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = {"name": "s", "base": QUICK, "grid": {"optimizer.lr": [0.01]}}
    config_error(lambda: bitlab.sweep(spec, **kwargs), field)


@pytest.mark.parametrize("experiment", [5, None, ["a"], b"", "", "x\0y", 1.5], ids=repr)
def test_experiment_must_be_a_dict_or_a_path(experiment):
    config_error(lambda: bitlab.validate(experiment))


@pytest.mark.parametrize("kind", [["optimizers"], {"a": 1}, 5, None.__class__, "nope"], ids=repr)
def test_list_refuses_unknown_kinds(kind):
    config_error(lambda: bitlab.list(kind), "kind")


def test_a_pathlike_and_bytes_path_are_accepted(tmp_path):
    path = write_json(tmp_path / "q.json", QUICK)
    assert bitlab.validate(path)["steps"] == 2
    assert bitlab.validate(os.fsencode(path))["steps"] == 2


# -- 2. Python values -> the experiment's JSON -------------------------------------------------

class Thing:
    pass


class BadRepr:
    def __repr__(self):
        raise RuntimeError("no repr")


NOT_JSON = [({1, 2}, "a set"), (frozenset([1]), "a frozenset"), (Thing(), "a Thing"),
            (b"ab", "bytes"), (1 + 2j, "a complex number"), (BadRepr(), "a BadRepr"),
            (np.array([1.0, 2.0]), "a ndarray"), (torch.ones(2), "a Tensor"),
            (print, "a builtin_function_or_method"), (Ellipsis, "an ellipsis")]


@pytest.mark.parametrize("value,kind", NOT_JSON, ids=lambda v: type(v).__name__)
def test_a_value_json_cannot_hold_is_named_by_its_path(value, kind):
    exp = json.loads(json.dumps(QUICK))
    exp["optimizer"]["lr"] = value
    e = config_error(lambda: bitlab.validate(exp), "optimizer.lr")
    assert e.rule == f"{kind} is not a JSON value"


@pytest.mark.parametrize("value,kind", NOT_JSON[:6], ids=lambda v: type(v).__name__)
def test_a_keyword_override_json_cannot_hold_is_named(value, kind):
    e = config_error(lambda: bitlab.validate(QUICK, optimizer__lr=value), "optimizer.lr")
    assert e.rule == f"{kind} is not a JSON value"


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, np.float32("nan"),
                                   np.float64("inf"), torch.tensor(float("nan"))], ids=repr)
@pytest.mark.parametrize("where", ["dict", "override"])
def test_nan_and_inf_are_refused_by_name(value, where):
    exp = json.loads(json.dumps(QUICK))
    if where == "dict":
        exp["optimizer"]["lr"] = value
        e = config_error(lambda: bitlab.validate(exp), "optimizer.lr")
    else:
        e = config_error(lambda: bitlab.validate(exp, optimizer__lr=value), "optimizer.lr")
    assert "finite" in e.rule


@pytest.mark.parametrize("key", [(1, 2), 1, None, 2.5, frozenset()], ids=repr)
def test_a_key_that_is_not_a_str_is_named(key):
    exp = json.loads(json.dumps(QUICK))
    exp["optimizer"][key] = 1
    e = config_error(lambda: bitlab.validate(exp))
    assert e.field.startswith("optimizer[") and "not a JSON key" in e.rule


@pytest.mark.parametrize("depth", [65, 1000, 100_000])
def test_deep_nesting_is_bounded_not_a_recursion_error(depth):
    value = {}
    for _ in range(depth):
        value = {"a": value}
    exp = {**QUICK, "description": value}
    e = config_error(lambda: bitlab.validate(exp))
    assert "nested deeper than 64" in e.rule and e.field.startswith("description.a.a")


def test_a_cycle_is_bounded_too():
    cycle = {}
    cycle["self"] = cycle
    assert "nested deeper" in config_error(lambda: bitlab.validate({**QUICK, "x": cycle})).rule


@pytest.mark.parametrize("value,expected", [
    (np.float32(0.25), 0.25), (np.float64(0.01), 0.01), (torch.tensor(0.5), 0.5),
    (np.int64(3), 3), ((0.9, 0.999), [0.9, 0.999])], ids=repr)
def test_numpy_torch_scalars_and_tuples_are_converted(value, expected):
    assert _checks.to_json(value, "x") == expected


def test_numpy_values_reach_the_run(tmp_path):
    exp = {**QUICK, "steps": np.int64(3), "optimizer": {"name": "sgd", "lr": np.float32(0.5)}}
    cfg = bitlab.validate(exp)
    assert cfg["steps"] == 3 and cfg["optimizer"]["lr"] == 0.5


@pytest.mark.parametrize("call", ["run", "sweep", "cost", "from_deepspeed"])
def test_every_entry_point_converts_through_the_checker(call, tmp_path):
    bad = {1, 2}
    calls = {
        "run": lambda: bitlab.run({**QUICK, "optimizer": {"name": "sgd", "lr": bad}},
                                  out=tmp_path / "r"),
        "sweep": lambda: bitlab.sweep({"name": "s", "base": QUICK, "grid": {"optimizer.lr": bad}},
                                      out=tmp_path / "s"),
        "cost": lambda: bitlab.cost({"params": 1e6, "workers": 8, "steps": bad}),
        "from_deepspeed": lambda: bitlab.from_deepspeed({"optimizer": {"type": "Adam",
                                                                       "params": {"lr": bad}}}),
    }
    e = config_error(calls[call])
    assert "a set is not a JSON value" in e.rule and e.field.endswith(
        {"run": "optimizer.lr", "sweep": "grid.optimizer.lr", "cost": "steps",
         "from_deepspeed": "optimizer.params.lr"}[call])


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**63, max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=4),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(JSON_VALUES)
def test_json_values_convert_unchanged(value):
    assert json.loads(_checks.to_json_text(value, "x")) == json.loads(json.dumps(value))


HOSTILE = st.sampled_from([{1}, math.nan, -math.inf, Thing(), b"x", 1j, 2**64, -2**63 - 1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="abcxyz", min_size=1, max_size=3), min_size=1, max_size=5),
       HOSTILE)
def test_the_first_bad_value_is_named_by_its_path(keys, bad):
    value = bad
    for key in reversed(keys):
        value = {key: value}
    with pytest.raises(bitlab.ConfigError) as e:
        _checks.to_json(value, "")
    assert e.value.field == ".".join(keys)


# -- 3. files through bitlab's readers ----------------------------------------------------------

@pytest.mark.parametrize("function", ["validate", "run", "from_deepspeed", "sweep"])
def test_a_missing_file_is_the_clis_message(function, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    e = config_error(lambda: getattr(bitlab, function)(tmp_path / "missing.json"))
    assert f"{tmp_path / 'missing.json'}: no such file" in e.message


def test_cost_of_a_missing_file_names_it(tmp_path):
    e = config_error(lambda: bitlab.cost(tmp_path / "missing.json"))
    assert "missing.json" in e.message


@pytest.mark.parametrize("text,says", [
    ("not json", "bad.json"), ("{", "bad.json"), ("", "bad.json"), ('{"a": 1, "a": 2}', "bad.json"),
    ("1e400", "bad.json"), ("[1, 2]", "bad.json"), ('{"a": 1}', "bad.json")], ids=repr)
def test_cost_of_a_file_that_is_no_spec_gives_the_clis_message(text, says, tmp_path):
    # `bitlab cost FILE` exits 2 with the same message; where it does not name the file
    # (a list, a missing field), the file is put in front
    path = tmp_path / "bad.json"
    path.write_text(text)
    e = config_error(lambda: bitlab.cost(path))
    assert says in e.message


def test_cost_of_a_folder_names_it(tmp_path):
    assert str(tmp_path) in config_error(lambda: bitlab.cost(tmp_path)).message


def test_cost_of_a_good_file_still_prices(tmp_path):
    spec = {"params": 1e6, "workers": 8, "steps": 100, "network": {"preset": "ethernet_40g_v100x4"},
            "optimizer": {"name": "adam"}}
    assert bitlab.cost(write_json(tmp_path / "c.json", spec)).summary == bitlab.cost(spec).summary


@pytest.mark.parametrize("argument", ["out", "results"])
def test_an_out_folder_that_cannot_be_made_is_the_clis_refusal(argument, tmp_path):
    # (a read-only folder gives the same refusal for a user that is not root; root may write
    # anywhere, so a path under a regular file stands in for it here)
    (tmp_path / "file").write_text("")
    e = config_error(lambda: bitlab.run(QUICK, **{argument: tmp_path / "file" / "run"}))
    assert str(tmp_path / "file") in e.message and "cannot create" in e.message
