"""bitlab from Python: the CLI's commands as functions, and your own model.

The functions do what ``bitlab run``, ``sweep``, ``cost``, ``validate`` and
``list`` do, in this process (a sweep still runs each of its runs as a child
``bitlab run``, as the CLI does). Each takes an experiment as a dict or a path
and returns a result; bad input raises :class:`ConfigError` with the message
the CLI prints on exit status 2.

>>> import bitlab
>>> r = bitlab.run("experiments/quickstart.json", steps=50, quiet=True)   # doctest: +SKIP
>>> r.status, r.metrics["train_loss"].iloc[-1]                             # doctest: +SKIP

``import bitlab.torch`` adds :class:`bitlab.torch.Simulation`, which trains
any ``torch.nn.Module`` through bitlab's simulated cluster (docs/python.md).
"""

import builtins
import json
import os

from ._errors import ConfigError, GradientError
from . import _checks, _threads

_OMP_WAIT_POLICY = _threads.set_passive_wait()  # before _bitlab loads libgomp

from . import _launch  # noqa: E402
_launch.load_mpi_globally()  # under mpirun/srun: before _bitlab links libmpi

from . import _bitlab  # noqa: E402 (after the wait policy)
from .results import Result, CostResult, SweepResult
from ._signals import Interrupted  # noqa: E402

__all__ = ["run", "sweep", "cost", "validate", "list", "from_deepspeed", "resolve",
           "Result", "CostResult", "SweepResult", "ConfigError", "GradientError",
           "DeepSpeedFragment", "Interrupted",
           "omp_wait_policy", "__version__"]

__version__ = _bitlab.version()


def omp_wait_policy():
    """How this process's OpenMP threads wait at the end of a parallel region,
    in words: ``"passive (set by bitlab)"``, the user's OMP_WAIT_POLICY or
    GOMP_SPINCOUNT, or libgomp's spinning default when OpenMP was loaded
    before bitlab (``import torch`` first); docs/python.md."""
    return _OMP_WAIT_POLICY


def _overrides_to_sets(overrides):
    """Keyword overrides -> ``--set path=value`` assignments.

    ``optimizer__lr=0.01`` or ``{"optimizer.lr": 0.01}`` both set optimizer.lr
    (a keyword cannot hold a dot, so ``__`` stands for it). Values are
    written as JSON, so strings, lists and booleans keep their type; a value
    JSON cannot hold (a set, NaN, an object) raises :class:`ConfigError`
    naming its path.
    """
    sets = []
    for key, value in overrides.items():
        path = key.replace("__", ".")
        sets.append(f"{path}={_checks.to_json_text(value, path)}")
    return sets


def _experiment_source(experiment):
    """(experiment as plain JSON data or None, file path) of an experiment given as a dict
    or a path."""
    if isinstance(experiment, (str, bytes, os.PathLike)):
        # read by bitlab's reader (its messages are the CLI's: "no such file", ...)
        return None, _checks.path("experiment", experiment)
    if isinstance(experiment, dict):
        return _checks.to_json(experiment, ""), ""
    raise ConfigError(
        f"experiment = {type(experiment).__name__}: must be a dict or a path to a JSON file",
        field="experiment", value=repr(experiment), rule="must be a dict or a path to a JSON file")


def resolve(experiment, *, set=None, unset=None, **overrides):
    """The experiment resolved (every default filled in) and bitlab's notes.

    ``set`` takes CLI-style assignments (``["optimizer.lr=0.01"]``), ``unset``
    paths to bring back to their defaults; keyword overrides are the same as
    ``set`` (``optimizer__lr=0.01``). Returns ``(config_dict, notes)``.
    """
    resolved = _resolved(experiment, set, unset, overrides)
    return resolved.config, builtins.list(resolved.notes)


def _resolved(experiment, set, unset, overrides):
    """The engine's resolved Experiment (``_bitlab.Experiment``): what :func:`run` and
    ``bitlab.torch.Simulation`` hand to the core as it is, without resolving it again."""
    raw, path = _experiment_source(experiment)
    sets = _checks.string_list("set", set) + _overrides_to_sets(overrides)
    unsets = _checks.string_list("unset", unset)
    return _bitlab.resolve(experiment=raw, file=path, sets=sets, unsets=unsets)


def _run_options(*, out, results, threads, quiet, checkpoint_every, resume):
    """The engine's RunOptions for :func:`run` and ``bitlab.torch.Simulation``, filled
    here once from their keywords (each checked as the CLI checks its flag)."""
    return _bitlab.RunOptions(
        out_dir=_checks.path("out", out, optional=True) or "",
        results_root=_checks.path("results", results), threads=_checks.threads(threads),
        quiet=_checks.flag("quiet", quiet),
        checkpoint_every=_checks.checkpoint_every(checkpoint_every),
        resume=_checks.flag("resume", resume))


def validate(experiment, *, set=None, unset=None, **overrides):
    """Checks an experiment as ``bitlab validate`` does; returns the resolved dict.

    Raises :class:`ConfigError` (field, value, rule) on bad input.

    >>> cfg = validate({"problem": {"name": "quadratic"}, "optimizer": {"name": "adam"}})
    >>> cfg["optimizer"]["lr"]
    0.001
    """
    config, _ = resolve(experiment, set=set, unset=unset, **overrides)
    return config


def run(experiment, *, out=None, results="results", threads=0, quiet=True,
        checkpoint_every=0, resume=None, set=None, unset=None, **overrides):
    """Runs one experiment, as ``bitlab run``; returns a :class:`Result`.

    ``experiment`` is a dict or a path; ``out`` the results folder (default
    ``results/<name>/<optimizer>-seed<seed>``, never overwriting); keyword
    overrides set options (``steps=200``, ``optimizer__lr=0.01``). A run that
    diverges returns normally with ``result.status == "diverged"`` (the CLI's
    exit 3 is ``result.exit_status``); a run that cannot write its results
    raises ``OSError``; Ctrl-C stops it after the step in flight and raises
    ``KeyboardInterrupt`` once its summary is written. ``resume=DIR`` continues
    a run from its checkpoint.

    ``threads`` is 0 (OpenMP's default) or 1 to 1024 and ``checkpoint_every``
    0 to 2^40, as on the command line; anything else raises
    :class:`ConfigError` before the run starts.
    """
    _checks.path("out", out, optional=True)  # checked as the CLI checks --out, even with resume
    _checks.checkpoint_every(checkpoint_every)
    if resume is not None:
        options = _run_options(out=_checks.path("resume", resume), results=results,
                               threads=threads, quiet=quiet, checkpoint_every=0, resume=True)
        status, folder = _bitlab.run(None, options)
    else:
        options = _run_options(out=out, results=results, threads=threads, quiet=quiet,
                               checkpoint_every=checkpoint_every, resume=False)
        status, folder = _bitlab.run(_resolved(experiment, set, unset, overrides), options)
    result = Result(folder, exit_status=status)
    if status == 4:
        raise OSError(f"{folder}: the run could not write its results: "
                      f"{result.summary.get('failure', 'see summary.json')}")
    if status in (129, 130, 143):
        raise KeyboardInterrupt(f"{folder}: interrupted ({result.summary.get('signal')})")
    return result


def sweep(sweep_spec, *, out=None, results="results", jobs=0, resume=False, quiet=True):
    """Runs a sweep, as ``bitlab sweep``; returns a :class:`SweepResult`.

    ``sweep_spec`` is a dict (a ``base`` path in it is relative to the current
    folder) or a path to a sweep file. Each run is a child ``bitlab run``.
    ``.table`` is sweep.csv as a DataFrame; ``.runs`` the runs' results.
    ``jobs`` is 0 (the machine's cores) or 1 to 1024, as ``--jobs``.
    """
    from . import _build_info
    jobs = _checks.jobs(jobs)
    resume = _checks.flag("resume", resume)
    quiet = _checks.flag("quiet", quiet)
    results = _checks.path("results", results)
    out = _checks.path("out", out, optional=True)
    if isinstance(sweep_spec, (str, bytes, os.PathLike)):
        raw, path = None, _checks.path("sweep", sweep_spec)
    elif isinstance(sweep_spec, dict):
        raw, path = _checks.to_json(sweep_spec, ""), ""
    else:
        raise ConfigError(f"sweep = {type(sweep_spec).__name__}: must be a dict or a path",
                          field="sweep", rule="must be a dict or a path to a JSON file")
    status, folder = _bitlab.sweep(spec=raw, file=path, base_dir=os.getcwd(), out_dir=out or "",
                                   results_root=results, jobs=jobs, resume=resume, quiet=quiet,
                                   binary=_build_info.BINARY)
    result = SweepResult(folder, exit_status=status)
    if status == 130:
        raise KeyboardInterrupt(f"{folder}: sweep interrupted")
    return result


def cost(spec, *, set=None, **overrides):
    """Prices a training job without training it, as ``bitlab cost --json``.

    ``spec`` is a cost spec (``{"params": 340e6, "workers": 64, ...}``) or an
    experiment (dict or path), priced as it stands. Returns a
    :class:`CostResult`: ``.summary`` the report as a dict, ``.phases`` a
    DataFrame, ``str(result)`` the CLI's table.

    >>> c = cost({"params": 340e6, "workers": 64, "steps": 1000,
    ...           "network": {"preset": "ethernet_40g_v100x4"},
    ...           "optimizer": {"name": "onebit_adam", "freeze_step": 150}})
    >>> c.summary["speedup"]["vs_fp16"] > 1                         # doctest: +SKIP
    True
    """
    sets = _checks.string_list("set", set) + _overrides_to_sets(overrides)
    if isinstance(spec, (str, bytes, os.PathLike)):
        # read by bitlab's reader, as `bitlab cost FILE`: a missing or non-JSON
        # file is a ConfigError naming it
        path = _checks.path("spec", spec)
        with _checks.naming("spec", path):
            report = _bitlab.cost(file=path, sets=sets)
    elif isinstance(spec, dict):
        report = _bitlab.cost(spec=_checks.to_json(spec, ""), sets=sets)
    else:
        raise ConfigError(f"spec = {type(spec).__name__}: must be a dict or a path",
                          field="spec", rule="must be a dict or a path to a JSON file")
    return CostResult(report)


def list(kind=None):
    """Everything ``bitlab list`` shows, as a dict.

    ``kind`` picks one section: "problems", "optimizers", "compressors",
    "networks", ... (the keys of the full dict).
    """
    everything = _bitlab.list_json()
    if kind is None:
        return everything
    if not isinstance(kind, str) or kind not in everything:
        raise ConfigError(f"kind = {kind!r}: must be one of {sorted(everything)}", field="kind",
                          value=repr(kind), rule=f"must be one of {sorted(everything)}")
    return everything[kind]


class DeepSpeedFragment(dict):
    """What :func:`from_deepspeed` returns: the experiment fragment, a dict that
    :func:`run` and :func:`validate` take as it is, with what the mapping said as
    data: ``notes`` (how fields were mapped, and the fields that mean nothing in a
    simulator, each "field: why") and ``warnings`` (what changes the run's answer,
    such as a warm-up as long as the run), lists of str."""

    def __init__(self, experiment, notes, warnings):
        super().__init__(experiment)
        self.notes = notes
        self.warnings = warnings


_said_deepspeed = set()  # the configs whose notes this process has printed


def from_deepspeed(config, *, workers=None, quiet=False, auto=None, **experiment):
    """A DeepSpeed config (dict or path to ds_config.json) as a bitlab experiment fragment.

    Maps the optimizer (Adam, AdamW, Lamb, OneBitAdam, ZeroOneAdam, OneBitLamb
    and their params), LoCo's ZeRO++ switch and the batch fields
    (docs/deepspeed.md). Keyword arguments are merged on top (``problem=...``,
    ``steps=...``), so the result can go to :func:`run`.

    Args:
        config: a DeepSpeed config as a dict, or the path of its JSON file.
        workers: the world size, when you choose it: DeepSpeed's batch rules
            then use it (and the notes say so); None derives it from the
            batch fields.
        quiet: print no notes; warnings that change the answer are printed
            even then. Each config's notes and warnings are printed once per
            process, on stderr.
        auto: the Hugging Face Trainer's arguments, by their
            ``TrainingArguments`` names, for a config written for the Trainer
            (``"lr": "auto"``): each ``"auto"`` is filled as the Trainer fills
            it (``learning_rate``, ``adam_beta1``/``adam_beta2``,
            ``adam_epsilon``, ``weight_decay``, ``per_device_train_batch_size``,
            ``gradient_accumulation_steps``, ``world_size``, ``max_grad_norm``,
            ``fp16``, ``bf16``, ...). Every ``"auto"`` left in a field bitlab
            reads is listed in one ConfigError.
        **experiment: experiment keys merged on top (dicts key by key).

    Returns:
        DeepSpeedFragment: the fragment (a dict), with ``.notes`` and
        ``.warnings`` (lists of str).

    Raises:
        ConfigError: an unknown field, an unsupported optimizer or a bad value,
            with ``field``, ``value`` and ``rule`` (the DeepSpeed field's).
    """
    if workers is not None:
        workers = _checks.workers(workers)
    quiet = _checks.flag("quiet", quiet)
    if auto is not None and not isinstance(auto, dict):
        raise ConfigError(f"auto = {_checks.short_repr(auto)}: must be a dict of the Trainer's "
                          f"arguments ({{\"learning_rate\": 3e-5, ...}})", field="auto",
                          value=_checks.short_repr(auto), rule="must be a dict")
    trainer_args = None if auto is None else _checks.to_json(auto, "auto")
    auto_key = None if auto is None else json.dumps(trainer_args, sort_keys=True)
    steps = experiment.get("steps")
    steps = steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None
    if isinstance(config, (str, bytes, os.PathLike)):
        path = _checks.path("config", config)
        mapped = _bitlab.deepspeed(file=path, workers=workers, steps=steps, auto=trainer_args)
        key = ("file", os.path.realpath(path), workers, steps, auto_key)
    elif isinstance(config, dict):
        data = _checks.to_json(config, "")
        mapped = _bitlab.deepspeed(config=data, workers=workers, steps=steps, auto=trainer_args)
        key = ("dict", json.dumps(data, sort_keys=True), workers, steps, auto_key)
    else:
        raise ConfigError(f"config = {type(config).__name__}: must be a dict or a path",
                          field="config", rule="must be a dict or a path to ds_config.json")
    notes = builtins.list(mapped["ignored"]) + builtins.list(mapped["notes"])
    fragment = DeepSpeedFragment(mapped["experiment"], notes, builtins.list(mapped["warnings"]))
    for key_, value in experiment.items():
        if isinstance(value, dict) and isinstance(fragment.get(key_), dict):
            fragment[key_] = {**fragment[key_], **value}
        else:
            fragment[key_] = value
    if key not in _said_deepspeed:
        _said_deepspeed.add(key)
        import sys
        for note in ([] if quiet else notes):
            print(f"bitlab: note: from_deepspeed: {note}", file=sys.stderr)
        for warning in fragment.warnings:
            print(f"bitlab: warning: from_deepspeed: {warning}", file=sys.stderr)
    return fragment
