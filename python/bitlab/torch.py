"""Train your own ``torch.nn.Module`` through bitlab's simulated cluster.

:class:`Simulation` makes bitlab's optimizers, exchanges, compressors and
network model act on a PyTorch model: each simulated worker runs your forward
and backward pass on its own data; as its block ends, bitlab takes its
gradients (read once, into the gradients' mean or the optimizer's compressed
worker stage; a row per worker is held only for the optimizers that read
per-worker gradients, LoCo and BinSGDM). That is the engine's per-worker path
(``Simulation::take_gradient``), not ``bitlab run``'s, which computes blocks of
workers in parallel; both give the same bits (docs/design.md, "One step in
three calls"). Then bitlab runs the optimizer and its collectives,
and the model's parameters change in place (they are views of bitlab's own,
no copy). The run folder is the usual one: ``bitlab plot``, ``report``,
``runs`` and ``recost`` read it unchanged.

>>> import torch, bitlab.torch
>>> model = torch.nn.Linear(4, 1)
>>> x, y = torch.randn(2, 8, 4), torch.randn(2, 8, 1)
>>> sim = bitlab.torch.Simulation(model, workers=2, steps=3, seed=1,
...                               optimizer={"name": "onebit_adam", "lr": 1e-2, "freeze_step": 1},
...                               out=tmp_path / "run")                        # doctest: +SKIP
>>> for step in range(sim.steps):                                            # doctest: +SKIP
...     for w in range(sim.workers):
...         with sim.worker(w) as wk:
...             loss = torch.nn.functional.mse_loss(model(x[w]), y[w])
...             loss.backward()
...             wk.loss = loss.item()
...     sim.step()
>>> summary = sim.close()                                                    # doctest: +SKIP

docs/python.md is the guide (the rules, checkpoints, measured compute time).
"""

import contextlib
import json
import math
import numbers
import os
import pathlib
import sys
import time

import torch as _torch

from . import (_batched, _bitlab, _checks, _launch, _report, _resolved, _run_options, _signals,
               from_deepspeed, omp_wait_policy)
from ._errors import ConfigError, GradientError
from ._report import KeywordError, Plan, SpinWarning
from ._signals import Interrupted
from .results import Result

__all__ = ["Simulation", "Worker", "ConfigError", "GradientError", "Interrupted", "Plan",
           "KeywordError", "SpinWarning"]

# metrics.csv's own columns (sim/engine/run_folder.cpp): an eval column may not take
# one of these names (pandas would silently read a second one as "train_loss.1").
BUILTIN_COLUMNS = ("step", "phase", "train_loss", "grad_norm", "bytes_sent", "bytes_sent_cum",
                   "messages", "messages_cum", "compute_s", "comm_s", "step_s", "sim_time_s",
                   "wall_s")


def _trained_parameters(model):
    """(name, parameter) of every parameter bitlab trains: those that require grad."""
    if not isinstance(model, _torch.nn.Module):
        raise ConfigError(f"model = {type(model).__name__}: must be a torch.nn.Module",
                          field="model", rule="must be a torch.nn.Module")
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not params:
        raise ConfigError("model: has no parameter that requires grad; nothing to train",
                          field="model", rule="must have a parameter that requires grad")
    for name, p in params:
        if p.dtype != _torch.float32:
            raise ConfigError(
                f"model parameter '{name}' = {p.dtype}: must be torch.float32 (bitlab's "
                f"optimizers and exchanges compute in float32; call model.float() first)",
                field=name, value=str(p.dtype), rule="must be torch.float32")
        if p.device.type != "cpu":
            raise ConfigError(
                f"model parameter '{name}' = on {p.device}: must be on the CPU (bitlab "
                f"simulates the cluster in this process; call model.cpu() first)",
                field=name, value=str(p.device), rule="must be on the CPU")
        if p.layout != _torch.strided:
            raise ConfigError(f"model parameter '{name}' = {p.layout}: must be dense (strided)",
                              field=name, value=str(p.layout), rule="must be dense")
    _check_no_shared_memory(params)
    return params


class _HookDraws:
    """Q's random starts exactly as torch 1.13's powerSGD_hook draws them: one
    ``randint(1_000_000_000)`` of ``numpy.random.RandomState(random_seed)`` per draw seeds
    torch's generator (forked, so the user's stream is untouched), then one ``torch.randn``
    per Q (or per shape when batched), in the bucket's order."""

    def __init__(self):
        self._rng, self._seed, self._next = None, None, 0

    def __call__(self, seed, draw, shapes):
        import numpy
        if self._rng is None or self._seed != seed or self._next != draw:
            # A resumed run: replay the stream to this draw.
            self._rng, self._seed = numpy.random.RandomState(seed), seed
            for _ in range(draw):
                self._rng.randint(1_000_000_000)
        torch_seed = self._rng.randint(1_000_000_000)
        self._next = draw + 1
        with _torch.random.fork_rng(devices=[]):
            _torch.manual_seed(torch_seed)
            parts = [_torch.randn(b, m, r, device="cpu", dtype=_torch.float32).reshape(-1)
                     for b, m, r in shapes]
        return _torch.cat(parts).numpy()


def _memory_now():
    """(this machine's memory, the memory available now) in bytes, as bitlab's check reads
    them."""
    reader = getattr(_bitlab, "memory_bytes", None)
    if reader is not None:
        return tuple(int(v) for v in reader())
    return (0, 0)


def _check_no_shared_memory(params):
    """Two parameters that are views of one memory (not one Parameter registered twice, which
    named_parameters() lists once) would come apart silently: bitlab gives each its own
    place in its parameter vector."""
    owner = {}
    for name, p in params:
        storage = getattr(p, "untyped_storage", None) or p.storage  # torch 2 / torch 1.13
        base = storage().data_ptr() if p.numel() else None
        if base is not None and base in owner:
            raise ConfigError(f"model parameters '{owner[base]}' and '{name}' share memory (one "
                              f"is a view of the other): bitlab gives each parameter memory of "
                              f"its own, so they would come apart; tie them as one Parameter "
                              f"(m.b = m.a) or give each its own (.clone())", field=name,
                              value=f"a view of '{owner[base]}'", rule="must not share memory")
        owner.setdefault(base, name)


def _flat_views(array, params):
    """Each parameter's shape as a view of one flat float32 numpy array (no copy)."""
    flat = _torch.from_numpy(array)
    views, offset = [], 0
    for _, p in params:
        n = p.numel()
        views.append(flat[offset:offset + n].view(p.shape))
        offset += n
    return views


def _check_gradient_form(g, where, name, index):
    """Gradient forms bitlab cannot take, refused by name before torch's own error: one with
    a graph attached (``backward(create_graph=True)``), a sparse one, one on another device."""
    if g.requires_grad or g.grad_fn is not None:
        raise GradientError(f"{where}: gradient has a graph attached (requires_grad, from "
                            f"backward(create_graph=True)): bitlab takes plain gradients; "
                            f"higher-order gradients are not supported (call backward() "
                            f"without create_graph)", field=name, value="a graph",
                            rule="must not have a graph attached", worker=index)
    if g.layout != _torch.strided:
        raise GradientError(f"{where}: gradient is {g.layout}: must be dense (strided); a "
                            f"sparse gradient (nn.Embedding(sparse=True)) is not supported",
                            field=name, value=str(g.layout), rule="must be dense", worker=index)
    if g.device.type != "cpu":
        raise GradientError(f"{where}: gradient on {g.device}: must be on the CPU",
                            field=name, value=str(g.device), rule="must be on the CPU",
                            worker=index)


def _scalar_loss(loss, worker):
    """``loss_fn``'s value for ``worker``: a one-element tensor that depends on the parameters
    (else ``backward()`` would fail inside bitlab with torch's own message)."""
    if not isinstance(loss, _torch.Tensor) or loss.numel() != 1:
        shown = (f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, _torch.Tensor)
                 else _checks.short_repr(loss))
        raise ConfigError(f"loss_fn(model, *batch) for worker {worker} returned {shown}: must "
                          f"return the worker's loss as a scalar tensor", field="loss_fn",
                          value=shown, rule="must return a scalar tensor")
    if loss.grad_fn is None and not loss.requires_grad:
        raise ConfigError(f"loss_fn(model, *batch) for worker {worker} returned a tensor that "
                          f"does not depend on the parameters (no grad_fn): compute it from "
                          f"model(...) without .detach() or torch.no_grad()", field="loss_fn",
                          value="a tensor without grad_fn",
                          rule="must depend on the model's parameters")
    return loss


def _takes_one_argument(function):
    """Whether ``function(model)`` binds (True when its signature cannot be read)."""
    import inspect
    try:
        inspect.signature(function).bind(None)
    except TypeError:
        return False
    except ValueError:  # no signature to read (some builtins)
        return True
    return True


def _check_column_name(column):
    """An eval column's name: a non-empty str, csv-safe, not one of metrics.csv's own."""
    shown = _checks.short_repr(column)
    if not isinstance(column, str) or not column or any(ch in column for ch in ',\n\r"'):
        raise ConfigError(f"eval column {shown}: must be a non-empty str without commas, quotes "
                          f"or newlines", field="eval_columns", value=shown,
                          rule="must be a csv-safe name")
    if column in BUILTIN_COLUMNS:
        raise ConfigError(f"eval column {shown}: is one of metrics.csv's own columns "
                          f"({', '.join(BUILTIN_COLUMNS)}); name it otherwise (e.g. "
                          f"'eval_{column}')", field="eval_columns", value=shown,
                          rule="must not be a built-in column")


def _eval_number(column, value, when):
    """``evaluate``'s value for ``column`` as a float: a finite int or float (Python or
    numpy), or a one-element tensor; a bool, a string, None, a longer tensor, NaN or inf
    is a ConfigError naming the column and the step."""
    shown = _checks.short_repr(value)
    where = f"evaluate(model)[{column!r}] {when}"
    number = None
    if isinstance(value, _torch.Tensor):
        if value.numel() == 1 and not value.is_complex() and value.dtype != _torch.bool:
            number = float(value.detach().reshape(()).cpu().item())
    elif not isinstance(value, (bool, str, bytes)) and getattr(value, "dtype", None) != bool:
        try:
            if isinstance(value, numbers.Real) or (hasattr(value, "item") and
                                                   getattr(value, "shape", None) == ()):
                number = float(value)
        except (TypeError, ValueError):
            number = None
    if number is None:
        raise ConfigError(f"{where} = {shown}: must be a number (int, float, numpy scalar or a "
                          f"one-element tensor)", field=f"evaluate.{column}", value=shown,
                          rule="must be a number")
    if not math.isfinite(number):
        raise ConfigError(f"{where} = {shown}: must be finite", field=f"evaluate.{column}",
                          value=shown, rule="must be finite")
    return number


class Worker:
    """What ``with sim.worker(w) as wk`` gives: set ``wk.loss`` to report the worker's loss."""

    __slots__ = ("index", "loss")

    def __init__(self, index):
        self.index = index
        self.loss = None


class Simulation:
    """Simulated data-parallel training of a ``torch.nn.Module`` with a bitlab optimizer.

    Arguments (keywords; ``optimizer`` and ``network`` are bitlab's sections,
    ``bitlab.list()`` and docs/python.md say what they take):

    - ``model``: the module; its parameters that require grad become bitlab's
      tensors (names and shapes as ``named_parameters()`` gives them), all
      float32 on the CPU.
    - ``workers``, ``steps``, ``seed``: the simulated cluster and run.
    - ``optimizer``: ``{"name": "onebit_adam", "lr": 1e-3, ...}`` or a name;
      a warm-up may be a share of the run (``"freeze_step": "15%"``).
    - ``network``: ``{"preset": ...}`` prices every step in simulated time;
      ``compute``: the compute model (``{"step_ms": ...}``), or ``"measured"``
      for the wall time of each worker's block (not reproducible: see docs).
    - ``deepspeed``: a DeepSpeed config (path or dict) for the optimizer and
      batch fields (:func:`bitlab.from_deepspeed`); explicit arguments win.
    - ``evaluate``: ``fn(model) -> {"eval_loss": ..., ...}``, called (under
      ``torch.no_grad()``) every ``eval_every`` steps and after the last; its
      keys become metrics.csv columns (``eval_columns``, or learned by one
      call when the Simulation is created).
    - ``out``: the results folder (default ``results/<name>/<optimizer>-seed<seed>``);
      ``checkpoint_every``: a checkpoint every k steps (:meth:`resume`).
    - ``threads``: bitlab's OpenMP threads (0: its default).
    - ``progress``: the run's start (memory estimate), its time per step
      and a progress bar with steps/s and ETA on stderr; ``None`` (default):
      when stderr is a terminal or a notebook. ``quiet=False``: ``bitlab
      run``'s own output instead (its bar, warnings and final report).
    - ``deepspeed_auto``: the Hugging Face Trainer's arguments for the
      ``"auto"`` values of the ``deepspeed`` config (:func:`bitlab.from_deepspeed`).
    - ``backend``: ``"auto"`` (default): a script started by ``mpirun -np R``
      or ``srun`` is one of R ranks, each computing its share of the workers
      (:attr:`local_workers`) and exchanging over MPI, rank 0 writing the
      results (identical to one process's); started on its own, one process
      computes every worker (``"sim"``). docs/slurm.md shows a job.

    Each step: every worker runs inside ``with sim.worker(w) as wk:`` (forward,
    ``backward()``, optionally ``wk.loss = ...``); then :meth:`step`. Then
    :meth:`close`. Bad input raises :class:`bitlab.ConfigError`; a gradient
    bitlab cannot take raises :class:`bitlab.GradientError`; a broken protocol
    (a worker twice in a step, ``step()`` before every worker ran) raises
    ``RuntimeError``. After an error inside :meth:`step` the run ends as
    "failed" (its summary.json says why; metrics.csv keeps every whole step).
    SIGTERM or SIGHUP (Slurm's time limit) stops the run after the step in
    flight, as ``bitlab run`` does: :meth:`step` writes the checkpoint and the
    summary ("interrupted"), releases the folder and raises
    :class:`Interrupted` (exit status 143 or 129 if not caught).
    """

    @_report.suggest_keywords
    def __init__(self, model, *, workers, steps, optimizer=None, seed=0, network=None, compute=None,
                 name=None, description="", out=None, results="results", eval_every=0,
                 evaluate=None, eval_columns=None, checkpoint_every=0, threads=0, quiet=True,
                 progress=None, deepspeed=None, deepspeed_auto=None, backend="auto",
                 _resume=None):
        self._in_evaluate = self._evaluate_failed = False
        self._signals_held = False
        threads = _checks.threads(threads)
        checkpoint_every = _checks.checkpoint_every(checkpoint_every)
        quiet = _checks.flag("quiet", quiet)
        progress = None if progress is None else _checks.flag("progress", progress)
        out = _checks.path("out", out, optional=True)
        results = _checks.path("results", results)
        if _resume is None:
            workers, steps = _checks.workers(workers), _checks.steps(steps)
            seed = _checks.seed(seed)
        self._params = _trained_parameters(model)
        self._model = model
        self._evaluate = evaluate
        self._measured = compute == "measured"
        tensors = [{"name": n, "shape": list(p.shape)} for n, p in self._params]
        if _resume is None:
            experiment = self._resolve(tensors, workers=workers, steps=steps,
                                       optimizer=optimizer, seed=seed, network=network,
                                       compute=compute, name=name, description=description,
                                       eval_every=eval_every, deepspeed=deepspeed, quiet=quiet,
                                       deepspeed_auto=deepspeed_auto)
            config = experiment.config
        else:
            experiment, config = None, self._check_resumable(_resume, tensors)
        if self._measured and config["network"]["preset"] == "none":
            raise ConfigError('compute = "measured": needs a network to price the steps '
                              '(network={"preset": ...})', field="compute", value='"measured"',
                              rule="needs a network")
        columns = self._eval_columns(evaluate, eval_columns)
        options = _run_options(out=_resume if _resume is not None else out, results=results,
                               threads=threads, quiet=quiet, checkpoint_every=checkpoint_every,
                               resume=_resume is not None)
        mpi = self._uses_mpi(backend)
        # bitlab takes each gradient on a thread of its own while torch computes the next
        # worker when torch leaves a core idle (docs/building.md, "The Python bridge": about 20 %
        # -> 10 % of torch's time there at 1 torch thread; with every core busy in torch the
        # extra thread only competes, so the take then runs inline). The bits are the same.
        background_take = _torch.get_num_threads() < (os.cpu_count() or 1)
        if mpi and self._measured:
            raise ConfigError('compute = "measured": not under MPI (each rank times only its own '
                              'workers); use a compute section ({"step_ms": ...})',
                              field="compute", value='"measured"', rule="one process only")
        x0 = _torch.cat([p.detach().reshape(-1) for _, p in self._params]).numpy()
        self._run = _bitlab.BridgeRun(experiment, x0, columns,
                                      self._evaluate_columns if columns else None, options,
                                      mpi=mpi, background_take=background_take)
        self._columns = columns
        self._config = self._run.config
        self.workers = int(self._config["cluster"]["workers"])
        self.steps = int(self._config["run"]["steps"] if "run" in self._config
                         else self._config["steps"])
        self._shapes = [tuple(p.shape) for _, p in self._params]
        self.rank, self.ranks = int(self._run.rank), int(self._run.ranks)
        self._local_range = range(*self._run.local_workers)
        self._bind(self._run.params())
        self._local_views = {}
        self._begun = False
        self._pending = None  # the gradients bitlab is taking in the background
        self._entered = set()
        self._losses = {}
        self._compute_s = [0.0] * self.workers
        self._active = None
        self._order_hooks = self._record_gradient_order()
        if self._measured:
            self._run.warn("compute_s is measured (the wall time of each worker's block on this "
                           "machine): metrics.csv's time columns are not reproducible, and "
                           "recost prices compute from config.json's compute section")
        self._start_reporting(progress, quiet, threads)

    def _start_reporting(self, progress, quiet, threads):
        """The stop signals, the spinning-wait warning, and (when reporting) the start lines."""
        self._clock = _report.StepClock()
        self._eval_s = 0.0
        self._bar = None
        self._plan_said = False
        self._signals_held = _signals.hold()
        _report.warn_if_spinning(omp_wait_policy(), threads or _torch.get_num_threads(),
                                 stacklevel=5)
        # quiet=False: bitlab run's own bar and report (the C++ side) take stderr.
        shown = _report.interactive() if progress is None else progress
        self._reporting = self.rank == 0 and (shown or not quiet)
        self._bar_on = self.rank == 0 and shown and quiet
        if self._reporting:
            self._say(self._start_line())

    def _say(self, line):
        if self._bar is not None:
            self._bar.say(line)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def _start_line(self):
        count = sum(p.numel() for _, p in self._params)
        memory = self.memory_estimate
        machine, available = _memory_now()
        text = (f"bitlab.torch: {self._config['optimizer']['name']}, {self.workers} workers, "
                f"{count:,} parameters in {len(self._params)} tensors, {self.steps} steps "
                f"-> {self.path}")
        if memory is not None:
            text += (f"\n  memory: bitlab's estimate {_report.human_bytes(memory)} (its cluster; "
                     f"your model's torch memory comes on top), "
                     f"{_report.human_bytes(available)} of {_report.human_bytes(machine)} "
                     f"available")
        return text

    @property
    def memory_estimate(self):
        """bitlab's estimate of the run's memory in bytes (its cluster's buffers: what the
        memory check before the run compares, with a 1/16 margin, with the memory
        available); torch's own memory (the model, its activations) comes on top."""
        value = getattr(self._run, "memory_estimate", None)
        return None if value is None else int(value)

    # -- construction ---------------------------------------------------------------------------

    @staticmethod
    def _uses_mpi(backend):
        """Whether this process is one rank of an MPI job (backend "auto", "sim" or "mpi")."""
        if backend not in ("auto", "sim", "mpi"):
            raise ConfigError(f"backend = {backend!r}: must be \"auto\", \"sim\" or \"mpi\"",
                              field="backend", value=repr(backend),
                              rule='must be "auto", "sim" or "mpi"')
        launched = _launch.launched_ranks()
        if backend == "mpi" and launched <= 1:
            raise ConfigError('backend = "mpi": this process was not started by an MPI launcher '
                              '(mpirun -np R python3 script.py, or srun); docs/slurm.md',
                              field="backend", value='"mpi"', rule="needs mpirun or srun")
        return backend != "sim" and launched > 1

    @staticmethod
    def _resolve(tensors, *, workers, steps, optimizer, seed, network, compute, name,
                 description, eval_every, deepspeed, quiet, deepspeed_auto):
        """The engine's resolved Experiment of the Simulation's arguments."""
        raw = {}
        if deepspeed is not None:
            raw = dict(from_deepspeed(deepspeed, workers=workers, quiet=quiet,
                                      auto=deepspeed_auto))
        elif deepspeed_auto is not None:
            raise ConfigError("deepspeed_auto = {...}: fills the \"auto\" values of a DeepSpeed "
                              "config; give the config too (deepspeed=...)",
                              field="deepspeed_auto", value="{...}",
                              rule="needs a deepspeed config")
        if optimizer is None and deepspeed is None:
            raise ConfigError("optimizer = None: give an optimizer ({\"name\": ..., options}) "
                              "or a deepspeed config", field="optimizer", value="None",
                              rule="is required without a deepspeed config")
        if optimizer is None:
            optimizer = {}
        if isinstance(optimizer, str):
            optimizer = {"name": optimizer}
        if not isinstance(optimizer, dict):
            raise ConfigError(f"optimizer = {_checks.short_repr(optimizer)}: must be a dict or a "
                              f"name", field="optimizer", value=_checks.short_repr(optimizer),
                              rule="must be a dict or a name")
        if name is None or (isinstance(name, str) and not name):
            name = "torch-model"
        raw.update({"name": name, "description": description, "seed": seed,
                    "steps": steps, "eval_every": eval_every,
                    "problem": {"name": "external", "tensors": tensors}})
        raw["cluster"] = {**raw.get("cluster", {}), "workers": workers}
        raw["optimizer"] = {**raw.get("optimizer", {}), **optimizer}
        if network is not None:
            raw["network"] = network
        if isinstance(compute, dict):
            raw["compute"] = compute
        elif compute not in (None, "measured"):
            raise ConfigError(f'compute = {compute!r}: must be a dict of compute options or '
                              f'"measured"', field="compute", value=repr(compute),
                              rule='must be a dict or "measured"')
        return _resolved(raw, None, None, {})

    @staticmethod
    def _check_resumable(path, tensors):
        """The run folder ``path`` checked as ``bitlab run --resume`` checks it (bitlab's own
        reader: a config.json that is not JSON, not an experiment or lacks a section is a
        ConfigError naming the file), then its tensors against the model's."""
        folder = _checks.path("resume", path)
        with _checks.naming("resume", folder):
            config, _ = _bitlab.resume_point(folder)
        problem = config.get("problem", {})
        if problem.get("name") != "external":
            raise ConfigError(f"resume {os.fspath(path)}: problem.name = "
                              f"{json.dumps(problem.get('name'))}: not a bitlab.torch run (resume "
                              f"it with bitlab run --resume)", field="problem.name",
                              value=json.dumps(problem.get("name")),
                              rule='must be "external" (a bitlab.torch run)')
        saved = problem.get("tensors")
        if saved != tensors:
            first = next((f"{a} != {b}" for a, b in zip(saved or [], tensors) if a != b),
                         f"{len(saved or [])} tensors saved, the model has {len(tensors)}")
            raise ConfigError(f"resume {os.fspath(path)}: problem.tensors = the model's "
                              f"parameters differ from the run's ({first}): resume with the "
                              f"same model", field="problem.tensors", rule="must match the run's")
        return config

    def _eval_columns(self, evaluate, eval_columns):
        """metrics.csv's eval columns: ``eval_columns``, or the keys of one call of
        ``evaluate`` (whose values are then checked as at every step)."""
        if evaluate is None:
            return []
        if not callable(evaluate) or not _takes_one_argument(evaluate):
            raise ConfigError(f"evaluate = {_checks.short_repr(evaluate)}: must be callable as "
                              f"evaluate(model)", field="evaluate", rule="must be callable")
        if eval_columns is None:
            values = self._call_evaluate("when the Simulation is made")
            columns = list(values)
            self._eval_values(values, columns, "when the Simulation is made")
        elif isinstance(eval_columns, (str, bytes)) or not isinstance(eval_columns, (list, tuple)):
            raise ConfigError(f"eval_columns = {_checks.short_repr(eval_columns)}: must be a list "
                              f"of column names", field="eval_columns",
                              value=_checks.short_repr(eval_columns), rule="must be a list of str")
        else:
            columns = list(eval_columns)
        for c in columns:
            _check_column_name(c)
        repeated = sorted({c for c in columns if columns.count(c) > 1})
        if repeated:
            raise ConfigError(f"eval_columns = {columns}: {repeated[0]!r} given twice: each "
                              f"column once", field="eval_columns", value=repr(repeated[0]),
                              rule="must not repeat a name")
        return columns

    def _call_evaluate(self, when):
        """evaluate(model) under no_grad, with step() and the blocks locked out; its dict."""
        self._in_evaluate = True
        start = time.perf_counter()
        try:
            with _torch.no_grad():
                values = self._evaluate(self._model)
        finally:
            self._in_evaluate = False
            self._eval_s = getattr(self, "_eval_s", 0.0) + time.perf_counter() - start
        if not isinstance(values, dict):
            raise ConfigError(f"evaluate(model) {when} returned {_checks.short_repr(values)}: "
                              f"must return a dict of column name -> number", field="evaluate",
                              value=_checks.short_repr(values), rule="must return a dict")
        return values

    def _evaluate_columns(self):
        """What the C++ run calls at an eval step: the columns' values, checked."""
        step = f"at step {self.steps_done}"
        try:
            return self._eval_values(self._call_evaluate(step), self._columns, step)
        except BaseException:
            self._evaluate_failed = True  # step() puts the last written step's parameters back
            raise

    @staticmethod
    def _eval_values(values, columns, when):
        """The values of ``columns`` in ``values`` as floats: each a finite number (Python,
        numpy, or a one-element tensor); anything else a ConfigError naming key and step."""
        missing = [c for c in columns if c not in values]
        if missing:
            raise ConfigError(f"evaluate(model) {when} returned no {missing[0]!r}: it must "
                              f"return every column of {columns}", field=f"evaluate.{missing[0]}",
                              rule="must return every eval column")
        return [_eval_number(c, values[c], when) for c in columns]

    def _bind(self, array):
        """Points every parameter at `array`'s memory (shared, or a worker's own copy)."""
        for (_, p), v in zip(self._params, _flat_views(array, self._params)):
            p.data = v
        self._bound_ptrs = [p.data_ptr() for _, p in self._params]

    @classmethod
    @_report.suggest_keywords
    def resume(cls, model, path, *, evaluate=None, eval_columns=None, threads=0, quiet=True,
               progress=None, backend="auto"):
        """Continues the run in ``path`` from its last checkpoint.

        ``model`` must have the run's parameters (names and shapes); its values
        become the checkpoint's. Continue the loop from ``sim.steps_done``
        (your data must be drawn from the step index for the run to match an
        uninterrupted one). The optimizer's state, the error buffers and the
        step count come from the checkpoint.
        """
        config = cls._check_resumable(path, [{"name": n, "shape": list(p.shape)}
                                             for n, p in _trained_parameters(model)])
        return cls(model, workers=config["cluster"]["workers"], steps=config["steps"],
                   optimizer=config["optimizer"], evaluate=evaluate, eval_columns=eval_columns,
                   threads=threads, quiet=quiet, progress=progress, backend=backend,
                   _resume=path)

    # -- the step loop ---------------------------------------------------------------------------

    def worker(self, index):
        """``with sim.worker(w) as wk:`` — run worker ``w``'s forward and backward inside.

        On entry the model holds the parameters worker ``w`` sees (its own
        copy under 0/1 Adam's local steps) and no gradients; on a clean exit
        every trained parameter's ``.grad`` goes to bitlab (checked: present,
        float32, CPU, contiguous, its parameter's shape) and is cleared.
        ``w`` is any integer (``int``, numpy's, a 0-d tensor; not a ``bool``).
        """
        return _WorkerBlock(self, _checks.worker_index(index, self.workers))

    def _enter(self, index):
        self._check_open("sim.worker(w)")
        index = _checks.worker_index(index, self.workers)
        if index not in self._local_range:
            raise ValueError(f"worker {index}: not this process's: rank {self.rank} of "
                             f"{self.ranks} computes workers [{self._local_range.start}, "
                             f"{self._local_range.stop}) (loop over sim.local_workers)")
        if self._active is not None:
            raise RuntimeError(f"worker {index}: entered inside worker {self._active}'s block; "
                               f"blocks do not nest")
        if index in self._entered:
            raise RuntimeError(f"worker {index}: entered twice in step {self.steps_done + 1}; "
                               f"each worker runs once per step, then sim.step()")
        if not self._begun:
            # Before the step's first worker runs: the optimizer may give the
            # workers parameters of their own for this step (0/1 Adam).
            self._clock.begin()
            self._run.begin_step()
            self._begun = True
        self._active = index
        local = self._local(index)
        if local is not None:
            for (_, p), v in zip(self._params, local):
                p.data = v
        for _, p in self._params:
            p.grad = None
        self._block_start = time.perf_counter()

    @property
    def local_workers(self):
        """The workers this process computes: ``range(sim.workers)`` in one process, this
        rank's block under MPI (``mpirun -np R``: ``workers / R`` each).

        Write the loop ``for w in sim.local_workers:`` and the same script
        serves both.
        """
        return self._local_range

    def run_workers(self, loss_fn, batches, *, route="batched"):
        """Every worker's forward and backward of this step, in one batched pass where it can.

        ``loss_fn(model, *batch)`` returns a worker's loss (a scalar tensor) on
        its batch; ``batches[w]`` is worker ``w``'s batch (a tuple of tensors,
        or one tensor), every worker's of the same shapes. The gradients are
        computed for all workers at once with functorch's ``vmap`` and
        ``grad`` (much faster than n small passes) and handed to bitlab as the
        ``with sim.worker(w)`` loop hands them. Where the model does not allow
        it (batch-norm statistics or other buffers written in training mode,
        dropout, data-dependent control flow, workers holding parameters of
        their own), it runs that loop instead and says why, once. Returns
        the workers' losses; then call :meth:`step`.

        The gradients equal the loop's to float rounding (a batched product
        may sum in another order), and are the same bits run to run.
        ``route="loop"`` runs the loop always: on torch 1.13 a convolution's
        per-worker weight gradient becomes a grouped convolution that can be
        several times slower than the loop on a busy machine (docs/python.md).

        >>> losses = sim.run_workers(lambda m, x, y: F.cross_entropy(m(x), y),
        ...                          [(x[w], y[w]) for w in range(sim.workers)])  # doctest: +SKIP
        >>> sim.step()                                                           # doctest: +SKIP
        """
        self._check_open("run_workers()")
        if self._entered or self._active is not None:
            raise RuntimeError(f"step {self.steps_done + 1}: run_workers() after workers "
                               f"{sorted(self._entered)} ran their blocks: use one or the other "
                               f"in a step")
        if not callable(loss_fn):
            raise ConfigError(f"loss_fn = {loss_fn!r}: must be callable as loss_fn(model, *batch)",
                              field="loss_fn", rule="must be callable")
        workers = list(self.local_workers)
        try:
            given = len(batches)
        except TypeError:
            raise ConfigError(f"batches = {type(batches).__name__}: must be a sequence of "
                              f"{self.workers} batches (batches[w]: worker w's)", field="batches",
                              rule="must be a sequence, one batch per worker") from None
        if given != self.workers:
            raise ConfigError(f"batches: {given} batches for {self.workers} workers: give one per "
                              f"worker", field="batches", value=str(given),
                              rule=f"must hold {self.workers} batches")
        if route not in ("batched", "loop"):
            raise ConfigError(f'route = {route!r}: must be "batched" or "loop"', field="route",
                              value=repr(route), rule='must be "batched" or "loop"')
        if not self._begun:
            self._clock.begin()
            self._run.begin_step()
            self._begun = True
        if route == "loop":
            return self._run_looped(loss_fn, batches, workers)
        reason = self._unbatchable_reason(workers)
        if reason is None:
            try:
                return self._run_batched(loss_fn, batches, workers)
            except _batched.Unbatchable as e:
                reason = str(e)
        self._say_once(f"run_workers: one worker at a time ({reason})")
        return self._run_looped(loss_fn, batches, workers)

    def _unbatchable_reason(self, workers):
        if any(self._local(w) is not None for w in workers):
            return ("the workers hold parameters of their own this step (the optimizer's local "
                    "steps): one batched pass needs shared parameters")
        return None

    def _run_batched(self, loss_fn, batches, workers):
        start = time.perf_counter()
        grads, losses = _batched.batched_gradients(self._model, self._params, loss_fn,
                                                   [batches[w] for w in workers])
        elapsed = (time.perf_counter() - start) / max(1, len(workers))
        out = []
        for i, w in enumerate(workers):
            loss = float(losses[i])
            self._hand_in(w, [g[i] for g in grads], loss)
            self._losses[w] = True
            self._compute_s[w] = elapsed
            self._entered.add(w)
            out.append(loss)
        return out

    def _run_looped(self, loss_fn, batches, workers):
        out = []
        for w in workers:
            batch = batches[w]
            batch = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
            with self.worker(w) as wk:
                loss = _scalar_loss(loss_fn(self._model, *batch), w)
                loss.backward()
                wk.loss = loss.item()
            out.append(wk.loss)
        return out

    def _say_once(self, text):
        """A note kept in summary.json's warnings (and said on stderr unless quiet), once a run."""
        said = getattr(self, "_said", set())
        if text not in said:
            said.add(text)
            self._said = said
            self._run.warn(text)

    def _hand_in(self, index, grads, loss):
        """Worker ``index``'s gradients (contiguous float32, one per trained parameter) to bitlab.

        bitlab takes them on a thread of its own while this thread goes on to the next
        worker; the tensors are kept alive until that take is done (the next hand-in,
        :meth:`step` or :meth:`close` waits for it). A gradient bitlab refuses (not
        finite) is raised at the next of those, naming its worker.
        """
        start = time.perf_counter()
        with self._take_errors():
            self._run.take_gradient(index, [g.data_ptr() for g in grads], loss)
        self._pending = grads
        self._clock.add_bitlab(time.perf_counter() - start)

    @contextlib.contextmanager
    def _take_errors(self):
        """bitlab's refusal of a handed-in gradient (field: the parameter) as a GradientError;
        the run then ends "failed"."""
        try:
            yield
        except GradientError as error:  # raised by the core with its worker, field and element
            self._pending = None
            self._fail(error)
            raise

    def _sync(self):
        """Waits for the gradient bitlab is taking in the background (raising its refusal)."""
        with self._take_errors():
            self._run.wait()
        self._pending = None

    def _local(self, index):
        """Worker ``index``'s own parameters as views, or None while it reads the shared ones
        (an optimizer may give workers their own copies mid-run: asked again until then)."""
        if self._local_views.get(index) is None:
            array = self._run.local_params(index)
            self._local_views[index] = None if array is None else _flat_views(array, self._params)
        return self._local_views[index]

    def _exit(self, index, wk, failed):
        elapsed = time.perf_counter() - self._block_start
        self._active = None
        try:
            if failed:
                return
            grads = self._take_gradients(index)
            loss = self._loss_value(index, wk.loss)
            # The one read: bitlab takes each .grad now, while it is still in
            # cache, into what its optimizer reads (the gradients' mean, or
            # the compressed worker stage); torch then reuses the buffer for
            # the next worker (holding every worker's .grad until step() cost
            # 10-20 % more backward time: fresh memory each time).
            self._hand_in(index, grads, loss)
            if self._order_hooks:
                self._hand_gradient_order()
            self._losses[index] = wk.loss is not None
            self._compute_s[index] = elapsed
            self._entered.add(index)
        finally:
            for _, p in self._params:
                p.grad = None
            if self._local_views.get(index) is not None:
                self._bind_shared()

    def _record_gradient_order(self):
        """With gradient_exchange powersgd: hooks that note the order in which the first
        backward produces each parameter's gradient, the order DDP rebuilds its buckets in
        (docs/algorithms.md §10)."""
        exchange = self._config["optimizer"].get("gradient_exchange") or {}
        if exchange.get("name") != "powersgd":
            return []
        self._ready_order = []

        def noted(k):
            def hook(_grad):
                if k not in self._ready_order:
                    self._ready_order.append(k)
            return hook
        return [p.register_hook(noted(k)) for k, (_, p) in enumerate(self._params)]

    def _hand_gradient_order(self):
        for h in self._order_hooks:
            h.remove()
        self._order_hooks = []
        order = self._ready_order
        if len(order) != len(self._params):
            # A parameter's gradient came from elsewhere (set by hand): the
            # model's reverse order, as bitlab's own problems use.
            order = list(range(len(self._params)))[::-1]
        self._run.set_powersgd_hooks(order, _HookDraws())

    def _bind_shared(self):
        shared = _flat_views(self._run.params(), self._params)
        for (_, p), v in zip(self._params, shared):
            p.data = v

    def _take_gradients(self, index):
        grads = []
        local = self._local_ptrs(index)
        for k, (name, p) in enumerate(self._params):
            g = p.grad
            where = f"worker {index}, parameter '{name}'"
            if tuple(p.shape) != self._shapes[k] or p.data_ptr() not in (
                    self._bound_ptrs[k], local[k] if local else None):
                raise GradientError(f"{where}: the parameter was replaced or changed shape (now "
                                    f"{tuple(p.shape)}): bitlab's tensors are fixed when the "
                                    f"Simulation is made (create a new one)", field=name,
                                    rule="parameters must keep their shape and storage",
                                    worker=index)
            if g is None:
                raise GradientError(f"{where}: has no gradient (.grad is None after the block): "
                                    f"every trained parameter needs one each step (call "
                                    f"backward() inside the block; freeze unused parameters "
                                    f"with requires_grad_(False) before making the Simulation)",
                                    field=name, rule="must have a gradient", worker=index)
            _check_gradient_form(g, where, name, index)
            if g.dtype != _torch.float32:
                raise GradientError(f"{where}: gradient dtype {g.dtype}: must be torch.float32 "
                                    f"(refused, not converted: bitlab computes in float32 and a "
                                    f"silent cast would change the bits)", field=name,
                                    value=str(g.dtype), rule="must be torch.float32", worker=index)
            if g.device.type != "cpu":
                raise GradientError(f"{where}: gradient on {g.device}: must be on the CPU",
                                    field=name, value=str(g.device), rule="must be on the CPU",
                                    worker=index)
            if g.layout != _torch.strided:
                raise GradientError(f"{where}: gradient is {g.layout}: must be dense",
                                    field=name, value=str(g.layout), rule="must be dense",
                                    worker=index)
            if tuple(g.shape) != tuple(p.shape):
                raise GradientError(f"{where}: gradient shape {tuple(g.shape)}: must be the "
                                    f"parameter's {tuple(p.shape)}", field=name,
                                    value=str(tuple(g.shape)), rule="must have the parameter's shape",
                                    worker=index)
            if not g.is_contiguous():
                raise GradientError(f"{where}: gradient is not contiguous (strides {g.stride()}): "
                                    f"must be contiguous (bitlab reads it as one buffer; assign "
                                    f"p.grad = g.contiguous())", field=name, value=str(g.stride()),
                                    rule="must be contiguous", worker=index)
            grads.append(g)
        return grads

    def _local_ptrs(self, index):
        local = self._local_views.get(index)
        return () if local is None else tuple(v.data_ptr() for v in local)

    @staticmethod
    def _loss_value(index, loss):
        if loss is None:
            return None
        if isinstance(loss, _torch.Tensor):
            if loss.numel() != 1:
                raise ConfigError(f"worker {index}: wk.loss is a tensor of {loss.numel()} "
                                  f"elements: must be a number (loss.item())", field="wk.loss",
                                  value=f"a tensor of {loss.numel()} elements",
                                  rule="must be a number")
            loss = loss.item()
        try:
            if isinstance(loss, (bool, str, bytes)):
                raise TypeError
            return float(loss)
        except (TypeError, ValueError):
            raise ConfigError(f"worker {index}: wk.loss = {_checks.short_repr(loss)}: must be a "
                              f"number", field="wk.loss", value=_checks.short_repr(loss),
                              rule="must be a number") from None

    def step(self):
        """bitlab's exchange and update for this step; the parameters change in place.

        Every worker must have run its block. Returns False once the run has
        ended (its last step, or a divergence: see :attr:`status`).
        """
        self._check_open()
        missing = [w for w in self._local_range if w not in self._entered]
        if missing:
            raise RuntimeError(f"step {self.steps_done + 1}: step() before workers {missing} ran "
                               f"their block (with sim.worker(w): ...)")
        given = set(self._losses.values())
        if len(given) > 1:
            without = [w for w, has in self._losses.items() if not has]
            raise ValueError(f"step {self.steps_done + 1}: workers {without} set no wk.loss while "
                             f"others did: set it in every worker's block or in none")
        compute = list(self._compute_s) if self._measured else None
        self._clock.begin()  # a step with no block (no local worker under MPI) starts here
        start, self._eval_s = time.perf_counter(), 0.0
        self._sync()
        if self._order_hooks:
            # No block's backward ran the hooks (run_workers' batched route): PowerSGD gets
            # the model's reverse order, and torch's random starts all the same.
            self._hand_gradient_order()
        # The parameters before an eval step: when evaluate raises (or Ctrl-C arrives in it),
        # the model goes back to them, the last step metrics.csv holds (one copy per eval step).
        before = self._run.params().copy() if self._eval_due(self.steps_done + 1) else None
        self._evaluate_failed = False
        try:
            go_on = self._run.step(compute)
        except BaseException as e:
            if before is not None and self._evaluate_failed:
                self._run.params()[:] = before
            self._fail(e)
            raise
        finally:
            self._entered.clear()
            self._losses.clear()
            self._begun = False
        self._clock.add_bitlab(time.perf_counter() - start - self._eval_s)
        self._clock.end()
        if not go_on and self._run.status == "failed":
            self._raise_write_failure()
        if not go_on and self._run.status == "interrupted":
            self._raise_interrupted()
        self._report_step()
        return go_on

    def _report_step(self):
        """The plan line once the first steps are timed (step 2: the first pays for warm-up),
        then the bar."""
        if not self._reporting:
            return
        timed = len(self._clock.steps)
        if not self._plan_said and (timed >= 2 or self.steps_done >= self.steps):
            self._plan_said = True
            self._say(f"bitlab.torch: {self._plan()}")
        if self._bar_on:
            if self._bar is None:
                self._bar = _report.ProgressBar(self.steps, self.steps_done - timed)
            self._bar.update(self.steps_done)

    def _plan(self):
        typical = self._clock.typical()
        if typical is None:
            return None
        machine, available = _memory_now()
        return Plan(typical[0], typical[1], self.steps, self.steps_done, len(self._clock.steps),
                    self.memory_estimate, available)

    def plan(self, loss_fn=None, batches=None, *, steps=2):
        """How long the run will take, from real steps: ``≈ X s a step, ≈ Y min for T steps,
        torch Z %, bitlab W %`` (a :class:`Plan`; ``str()`` is that line).

        With ``loss_fn`` and ``batches`` (as :meth:`run_workers` takes them; ``batches`` may
        be a function of the step index returning them), it first runs up to ``steps`` of
        the run's steps through :meth:`run_workers` (real steps: they count, and the loop
        continues from :attr:`steps_done`). Without them, it uses the steps run so far.
        The first step pays for warm-up, so two steps time the second.
        """
        if loss_fn is not None:
            steps = _checks.integer("steps", steps, 1, 100, "must be an integer from 1 to 100")
            for _ in range(min(steps, self.steps - self.steps_done)):
                given = batches(self.steps_done) if callable(batches) else batches
                self.run_workers(loss_fn, given)
                self.step()
        plan = self._plan()
        if plan is None:
            raise RuntimeError("plan(): no step has run yet; run one, or give loss_fn and "
                               "batches (sim.plan(loss_fn, batches)) to time real steps")
        return plan

    def _raise_interrupted(self):
        """SIGTERM or SIGHUP stopped the run after this step (bitlab's handler asked it to, as
        the CLI's does): summary.json ("interrupted") and the checkpoint are written, the lock
        released; then Interrupted, the CLI's exit status when not caught."""
        signum = _signals.requested() or 15
        _signals.answered()
        try:
            self._run.finish()
        finally:
            self._end_reporting()
            self._detach()
        checkpoint = os.path.exists(self.path / "checkpoint.bin")
        message = (f"bitlab.torch: {_signals.signal_name(signum)}: the run stopped after step "
                   f"{self.steps_done} of {self.steps}; {self.path} holds its summary "
                   f"(\"interrupted\")" + (", and checkpoint.bin: continue it with "
                                           "bitlab.torch.Simulation.resume(model, path)"
                                           if checkpoint else
                                           " (no checkpoint: give checkpoint_every to resume)"))
        if self.rank == 0:
            sys.stderr.write(message + "\n")
            sys.stderr.flush()
        raise Interrupted(signum, self.path, self.steps_done, message)

    def _end_reporting(self):
        """The bar's last line, and bitlab's signal handlers released (once)."""
        bar = getattr(self, "_bar", None)
        if bar is not None:
            bar.close()
            self._bar = None
        if getattr(self, "_signals_held", False):
            self._signals_held = False
            _signals.release()

    def _eval_due(self, step):
        """Whether bitlab calls evaluate after ``step`` (sim/engine/simulation.cpp's rule)."""
        if not self._columns:
            return False
        every = int(self._config.get("eval_every", 0))
        return step == self.steps or (every > 0 and step % every == 0)

    def _raise_write_failure(self):
        """A step whose rows could not be written (a full disk): the run ends "failed",
        keeping every whole step, and OSError names the file (the CLI's exit 4)."""
        failure = self._run.failure
        try:
            self._run.finish()
        finally:
            self._end_reporting()
            self._detach()
        raise OSError(f"{self.path}: the run could not write its results at step "
                      f"{self.steps_done}: {failure}")

    def _fail(self, error):
        if not self._run.finished:
            self._run.fail(f"{type(error).__name__}: {error}")
        self._end_reporting()
        self._detach()

    def _check_open(self, what="step()"):
        if self._in_evaluate:
            raise RuntimeError(f"{what} called from inside evaluate(model): evaluate runs in the "
                               f"middle of a step; it may only read the model")
        if self._run.finished:
            raise RuntimeError(f"the simulation is closed ({self.status}): {self.path}")
        if self._run.ended:
            raise RuntimeError(f"the run has ended ({self.status} after {self.steps_done} steps): "
                               f"call close()")

    def close(self):
        """Ends the run: writes summary.json and returns it as a dict.

        Before the last step the run ends "interrupted" (with a checkpoint when
        ``checkpoint_every`` was set, so :meth:`resume` can continue it). The
        model keeps its final parameters (in memory of its own again).
        """
        if self._in_evaluate:
            raise RuntimeError("close() called from inside evaluate(model): evaluate runs in the "
                               "middle of a step; it may only read the model")
        try:
            if not self._run.finished:
                self._sync()
                self._run.finish()
        finally:
            self._end_reporting()
        self._detach()
        return self.summary

    def _detach(self):
        """Gives the parameters memory of their own (the values stay)."""
        if getattr(self, "_detached", False):
            return
        for _, p in self._params:
            p.data = p.data.clone()
        self._detached = True

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None and not self._run.finished:
            self._fail(exc)
        else:
            self.close()
        return False

    def __del__(self):
        try:
            if hasattr(self, "_run"):
                self._run.wait()  # no take may outlive the gradients it reads
        except Exception:
            pass
        try:
            if getattr(self, "ranks", 1) > 1:
                return  # ending a run is collective under MPI: close() it in the script
            if hasattr(self, "_run") and not self._run.finished:
                self._run.finish()
            if hasattr(self, "_params"):
                self._detach()
        except Exception:
            pass
        try:
            self._end_reporting()
        except Exception:
            pass

    # -- what the run wrote ----------------------------------------------------------------------

    @property
    def steps_done(self):
        return int(self._run.steps_done)

    @property
    def path(self):
        """The results folder, a ``pathlib.Path`` (``os.fspath``/``str`` give the text)."""
        return pathlib.Path(self._run.dir)

    @property
    def status(self):
        """"running" while steps remain; then "completed", "diverged", "failed" or
        (closed early) "interrupted"."""
        if not self._run.ended and not self._run.finished:
            return "running"
        return self._run.status

    @property
    def config(self):
        return dict(self._config)

    @property
    def result(self):
        return Result(self.path)

    @property
    def metrics(self):
        """metrics.csv as a pandas DataFrame (the rows written so far)."""
        return self.result.metrics

    @property
    def comm_log(self):
        return self.result.comm_log

    @property
    def summary(self):
        return self.result.summary

    def __repr__(self):
        return (f"bitlab.torch.Simulation({self._config['optimizer']['name']}, workers="
                f"{self.workers}, step {self.steps_done}/{self.steps}, {self.status}, "
                f"{str(self.path)!r})")


class _WorkerBlock:
    __slots__ = ("_sim", "_index", "_wk")

    def __init__(self, sim, index):
        self._sim = sim
        self._index = index
        self._wk = Worker(index)

    def __enter__(self):
        self._sim._enter(self._index)
        return self._wk

    def __exit__(self, exc_type, exc, tb):
        self._sim._exit(self._index, self._wk, failed=exc_type is not None)
        return False
