"""bitlab.run, sweep, cost, validate, list: the CLI's work as functions."""

import json
import os

import pytest

import bitlab
from conftest import ROOT, rows_without_wall, write_json

QUICK = {
    "name": "py-api",
    "seed": 1,
    "steps": 40,
    "eval_every": 10,
    "problem": {"name": "logistic", "dim": 10, "samples": 512},
    "cluster": {"workers": 4, "batch_size": 16},
    "optimizer": {"name": "adam", "lr": 0.05},
}


def test_run_matches_the_cli(cli, tmp_path):
    r = bitlab.run(QUICK, out=tmp_path / "py")
    assert r.status == "completed" and r.exit_status == 0
    assert list(r.metrics["step"]) == list(range(1, 41))
    assert {"step", "op", "sent_bytes"} <= set(r.comm_log.columns)
    assert r.summary["steps_completed"] == 40 and r.config["optimizer"]["lr"] == 0.05
    done = cli("run", write_json(tmp_path / "q.json", QUICK), "--out", tmp_path / "cli", "--quiet")
    assert done.returncode == 0, done.stderr
    for name in ("metrics.csv", "comm_log.csv"):
        assert rows_without_wall(tmp_path / "py" / name) == rows_without_wall(tmp_path / "cli" / name)


def test_run_takes_a_path_and_keyword_overrides(tmp_path):
    path = write_json(tmp_path / "q.json", QUICK)
    r = bitlab.run(path, out=tmp_path / "a", steps=12, optimizer__lr=0.01)
    assert r.summary["steps_completed"] == 12 and r.config["optimizer"]["lr"] == 0.01
    r = bitlab.run(path, out=tmp_path / "b", set=["optimizer.name=onebit_adam"])
    # the switch keeps the shared options (lr), as `bitlab run --set` does
    assert r.config["optimizer"]["name"] == "onebit_adam" and r.config["optimizer"]["lr"] == 0.05


def test_default_folder_under_results(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = bitlab.run(QUICK)
    assert os.path.relpath(r.path, tmp_path) == os.path.join("results", "py-api", "adam-seed1")
    assert bitlab.run(QUICK).path.endswith("adam-seed1-2")  # never overwritten


def test_bad_input_raises_config_error_with_field_value_rule(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = json.loads(json.dumps(QUICK))
    bad["optimizer"]["beta1"] = 1.0
    with pytest.raises(bitlab.ConfigError) as e:
        bitlab.run(bad)
    assert e.value.field == "optimizer.beta1"
    assert e.value.value == "1.0" and e.value.rule == "must be in [0, 1)"
    assert e.value.exit_status == 2 and isinstance(e.value, ValueError)
    assert not (tmp_path / "results").exists()  # no results folder on bad input
    with pytest.raises(bitlab.ConfigError, match="optimizer.lr"):
        bitlab.validate(QUICK, optimizer__lr=-1)
    with pytest.raises(bitlab.ConfigError, match=r"missing.json: no such file"):
        bitlab.run(tmp_path / "missing.json")
    with pytest.raises(bitlab.ConfigError, match="must be a dict or a path"):
        bitlab.run(42)


def test_a_bad_data_file_leaves_no_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exp = {**QUICK, "problem": {"name": "deep_mlp", "dataset": "digits", "widths": [4],
                                "data_dir": str(tmp_path / "nowhere")}}
    with pytest.raises(bitlab.ConfigError):
        bitlab.run(exp)
    assert not (tmp_path / "results" / "py-api" / "adam-seed1").exists()


def test_validate_resolves_every_default():
    cfg = bitlab.validate(QUICK)
    assert cfg["optimizer"]["beta2"] == 0.999 and cfg["cluster"]["sharding"] == "iid"
    config, notes = bitlab.resolve(QUICK, set=["optimizer.name=sgd"])
    assert config["optimizer"]["name"] == "sgd"


def test_list_has_every_registry():
    everything = bitlab.list()
    assert "optimizers" in everything and "problems" in everything
    assert {"adam", "onebit_adam", "zero_one_adam", "loco"} <= set(bitlab.list("optimizers"))
    external = bitlab.list("problems")["external"]
    assert [o["name"] for o in external["options"]] == ["tensors"]
    with pytest.raises(bitlab.ConfigError, match="must be one of"):
        bitlab.list("nonsense")


def test_cost_matches_the_cli(cli, tmp_path):
    spec = {"params": 340e6, "workers": 64, "steps": 1000,
            "network": {"preset": "ethernet_40g_v100x4"},
            "optimizer": {"name": "onebit_adam", "freeze_step": 150}}
    c = bitlab.cost(spec)
    done = cli("cost", write_json(tmp_path / "c.json", spec), "--json")
    assert done.returncode == 0, done.stderr
    assert c.summary == json.loads(done.stdout)
    assert "speed-up" in str(c) or "speedup" in str(c).lower()
    with pytest.raises(bitlab.ConfigError, match="workers"):
        bitlab.cost({**spec, "workers": 0})


def test_sweep_runs_and_reads_back(tmp_path):
    spec = {"name": "py-sweep", "base": str(write_json(tmp_path / "base.json", QUICK)),
            "grid": {"optimizer.lr": [0.01, 0.05]}, "seeds": [1]}
    s = bitlab.sweep(spec, out=tmp_path / "sw", jobs=2)
    assert s.exit_status == 0
    assert len(s.table) == 2 and set(s.table["status"]) == {"completed"}
    assert len(s.runs) == 2 and all(r.status == "completed" for r in s.runs)
    with pytest.raises(bitlab.ConfigError):
        bitlab.sweep({**spec, "grid": {"optimizer.lr": []}}, out=tmp_path / "bad")


def test_external_problem_is_refused_by_the_cli(cli, tmp_path):
    exp = {**QUICK, "problem": {"name": "external", "tensors": [{"name": "w", "shape": [3]}]}}
    assert bitlab.validate(exp)["problem"]["tensors"] == [{"name": "w", "shape": [3]}]
    done = cli("run", write_json(tmp_path / "e.json", exp), "--out", tmp_path / "x")
    assert done.returncode == 2 and "bitlab.torch" in done.stderr
    assert not (tmp_path / "x").exists()


def test_from_deepspeed_reads_the_tutorial_config(tmp_path, capsys):
    ds = ROOT / "experiments" / "deepspeed" / "ds_config.json"
    fragment = bitlab.from_deepspeed(ds, steps=20, problem={"name": "logistic", "dim": 5})
    # The notes and warnings are data, and said once per config on stderr.
    assert any(n.startswith("gradient_clipping: ") for n in fragment.notes), fragment.notes
    assert fragment.warnings == ["optimizer.freeze_step = 23000 is not below steps = 20: the run "
                                 "never compresses (it is Adam throughout)"]
    err = capsys.readouterr().err
    assert "bitlab: note: from_deepspeed: gradient_clipping: " in err
    assert "bitlab: warning: from_deepspeed: optimizer.freeze_step = 23000" in err
    again = bitlab.from_deepspeed(ds, steps=20, problem={"name": "logistic", "dim": 5})
    assert again.notes == fragment.notes and capsys.readouterr().err == ""
    assert fragment["optimizer"]["name"] == "onebit_adam"
    assert fragment["optimizer"]["freeze_step"] == 23000 and fragment["cluster"]["workers"] == 256
    fragment["optimizer"]["freeze_step"] = 5
    fragment["cluster"]["workers"] = 4
    assert bitlab.run(fragment, out=tmp_path / "r").status == "completed"
    with pytest.raises(bitlab.ConfigError, match="freeze_stp"):
        bitlab.from_deepspeed({"train_batch_size": 8, "optimizer": {"type": "OneBitAdam",
                                                               "params": {"freeze_stp": 3}}})
    with pytest.raises(bitlab.ConfigError, match="train_batch_sise"):
        bitlab.from_deepspeed({"train_batch_sise": 8})


def test_a_set_deepspeed_config_reads_as_the_cli_reads_it():
    # One override sequence for a file and for Python data: --set deepspeed_config=FILE fills
    # the optimizer in from the DeepSpeed file, what is set already wins (the CLI's rule).
    ds = ROOT / "experiments" / "deepspeed" / "ds_config.json"
    experiment = {k: v for k, v in QUICK.items() if k != "optimizer"}
    config, notes = bitlab.resolve(experiment, set=[f"deepspeed_config={ds}"])
    assert config["optimizer"]["name"] == "onebit_adam", config["optimizer"]
    assert any("read from DeepSpeed config" in n for n in notes), notes
    assert config["cluster"]["workers"] == QUICK["cluster"]["workers"]


def test_from_deepspeed_quiet_keeps_the_notes_not_the_warnings(capsys):
    ds = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "gradient_clipping": 1.0,
          "optimizer": {"type": "OneBitAdam", "params": {"freeze_step": 500}}}
    fragment = bitlab.from_deepspeed(ds, steps=30, quiet=True)
    err = capsys.readouterr().err
    assert "gradient_clipping" not in err and fragment.notes
    assert "optimizer.freeze_step = 500 is not below steps = 30" in err


def test_from_deepspeed_batch_note_follows_the_given_workers():
    ds = {"train_batch_size": 4096, "train_micro_batch_size_per_gpu": 16,
          "optimizer": {"type": "Adam"}}
    derived = bitlab.from_deepspeed(ds, quiet=True)
    assert derived["cluster"] == {"workers": 256, "batch_size": 16}
    given = bitlab.from_deepspeed(ds, workers=8, quiet=True)
    # DeepSpeed's rule at a world size of 8: 4096 / (16 x 8) = 32 micro-batches a step
    assert given["cluster"] == {"workers": 8, "batch_size": 512}
    assert given["compute"]["gradient_accumulation_steps"] == 32
    assert not any("cluster.workers = train_batch_size" in n for n in given.notes), given.notes
    assert any("cluster.workers = 8 (given)" in n for n in given.notes), given.notes


def test_a_deepspeed_error_has_its_parts():
    with pytest.raises(bitlab.ConfigError) as e:
        bitlab.from_deepspeed({"train_batch_size": 8, "optimizer": {"type": "Adam",
                                                               "params": {"lr": -1}}})
    assert e.value.field == "optimizer.params.lr" and e.value.value == "-1"
    assert e.value.rule.startswith("bitlab's ") and e.value.rule in e.value.message
