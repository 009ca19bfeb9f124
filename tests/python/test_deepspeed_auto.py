"""A Hugging Face Trainer's DeepSpeed config, "auto" values and all:
bitlab.from_deepspeed(cfg, auto={...}) and an experiment file's "deepspeed_auto" fill them as
the Trainer does (transformers' HfTrainerDeepSpeedConfig.trainer_config_process); every
"auto" left is named in one message."""

import json
import warnings

import pytest

import bitlab

# The ZeRO-2 config of the Hugging Face documentation (transformers, docs "DeepSpeed",
# "ZeRO-2 Example"), as users copy it.
HF_ZERO2 = {
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000,
             "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                              "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto",
                                                 "warmup_max_lr": "auto",
                                                 "warmup_num_steps": "auto"}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                          "allgather_partitions": True, "allgather_bucket_size": 2e8,
                          "overlap_comm": True, "reduce_scatter": True,
                          "reduce_bucket_size": 2e8, "contiguous_gradients": True},
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 2000,
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": False,
}

# What a Trainer script passes (TrainingArguments' names).
TRAINER = {"learning_rate": 3e-5, "adam_beta1": 0.9, "adam_beta2": 0.98, "adam_epsilon": 1e-6,
           "weight_decay": 0.01, "per_device_train_batch_size": 16,
           "gradient_accumulation_steps": 2, "max_grad_norm": 1.0, "fp16": False,
           "world_size": 4, "max_steps": 1000, "warmup_steps": 50}

READ_AUTOS = ["fp16.enabled", "optimizer.params.lr", "optimizer.params.betas",
              "optimizer.params.eps", "optimizer.params.weight_decay",
              "gradient_accumulation_steps", "gradient_clipping", "train_batch_size",
              "train_micro_batch_size_per_gpu"]


def _mapped(config, auto):
    """from_deepspeed's fragment and its notes, whether they come as warnings or as the
    fragment's ``notes``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fragment = bitlab.from_deepspeed(config, auto=auto)
    return fragment, list(getattr(fragment, "notes", [])) + [str(w.message) for w in caught]


def test_every_unfilled_auto_in_one_message():
    with pytest.raises(bitlab.ConfigError) as e:
        bitlab.from_deepspeed(HF_ZERO2)
    message = str(e.value)
    assert message.startswith('deepspeed config: fp16.enabled = "auto": "auto" is filled in by '
                              'the Hugging Face Trainer')
    assert '9 fields are "auto" here' in message
    for path in READ_AUTOS:
        assert path in message, path
    # each with the argument that fills it and the Trainer's default
    assert "optimizer.params.lr (learning_rate, the Trainer's default 5e-05)" in message
    assert "adam_beta1, adam_beta2" in message and "auto={" in message
    assert "scheduler" not in message.split(": ", 1)[1].split(". Give")[0]  # not read by bitlab


def test_trainer_arguments_fill_them():
    fragment, notes = _mapped(HF_ZERO2, TRAINER)
    assert any(n.startswith("optimizer.params.lr = 3e-05 (from learning_rate") or
               "optimizer.params.lr = 3e-05 (from learning_rate" in n for n in notes), notes
    opt = fragment["optimizer"]
    assert (opt["name"], opt["lr"], opt["beta1"], opt["beta2"], opt["eps"],
            opt["weight_decay"]) == ("adam", 3e-5, 0.9, 0.98, 1e-6, 0.01)
    # train_batch_size = world_size 4 x 16 x 2: four workers of 32 samples
    assert fragment["cluster"] == {"batch_size": 32, "workers": 4}
    # without world_size the run's workers are the world size
    without = {k: v for k, v in TRAINER.items() if k != "world_size"}
    fragment, notes = _mapped(HF_ZERO2, without)
    assert any("world_size not given" in n for n in notes), notes
    assert fragment["cluster"] == {"batch_size": 32}


def test_partial_arguments_list_what_is_left():
    with pytest.raises(bitlab.ConfigError) as e:
        bitlab.from_deepspeed(HF_ZERO2, auto={"learning_rate": 3e-5, "adam_beta1": 0.9})
    message = str(e.value)
    assert "optimizer.params.lr" not in message and "optimizer.params.betas" in message


def test_mismatch_and_typo_refused():
    config = json.loads(json.dumps(HF_ZERO2))
    config["optimizer"]["params"]["lr"] = 1e-3
    with pytest.raises(bitlab.ConfigError, match="optimizer.params.lr = 0.001 vs learning_rate"):
        bitlab.from_deepspeed(config, auto=TRAINER)
    with pytest.raises(bitlab.ConfigError, match='did you mean "learning_rate"'):
        bitlab.from_deepspeed(HF_ZERO2, auto={"learning_rat": 3e-5})
    with pytest.raises(bitlab.ConfigError, match="auto.fp16 = 1: must be true or false"):
        bitlab.from_deepspeed(HF_ZERO2, auto={**TRAINER, "fp16": 1})


def test_experiment_file_deepspeed_auto(tmp_path, cli):
    (tmp_path / "ds_config.json").write_text(json.dumps(HF_ZERO2))
    experiment = {"name": "hf", "steps": 5, "problem": {"name": "quadratic"},
                  "deepspeed_config": "ds_config.json", "deepspeed_auto": TRAINER}
    (tmp_path / "exp.json").write_text(json.dumps(experiment))
    done = cli("validate", tmp_path / "exp.json", "--print")
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout[done.stdout.index("{"):])
    assert resolved["optimizer"]["lr"] == 3e-5 and resolved["cluster"]["workers"] == 4
    del experiment["deepspeed_auto"]
    (tmp_path / "exp.json").write_text(json.dumps(experiment))
    done = cli("validate", tmp_path / "exp.json")
    assert done.returncode == 2 and '9 fields are "auto" here' in done.stderr
