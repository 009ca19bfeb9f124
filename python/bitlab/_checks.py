"""Checks of what Python hands to bitlab, before any C++ call.

Every public function and :class:`bitlab.torch.Simulation` checks its
arguments here, with the command line's rules (sim/cli/main.cpp,
sim/cli/sweep_command.cpp, sim/cli/thread_limits.hpp, sim/engine/config.cpp,
sim/cluster/cluster.cpp), and converts Python values into the experiment's
JSON text. Anything outside the rules raises :class:`ConfigError` naming the
argument (or the JSON path), the value and the rule, as ``bitlab run`` does on
exit status 2.
"""

import contextlib
import json
import math
import numbers
import operator
import os
import reprlib

from ._errors import ConfigError

__all__ = ["integer", "threads", "jobs", "checkpoint_every", "seed", "workers", "steps",
           "worker_index", "path", "to_json", "to_json_text", "short_repr", "MAX_THREADS",
           "MAX_JSON_DEPTH"]

MAX_THREADS = 1024                 # run --threads, sweep --jobs (sim/cli/thread_limits.hpp)
MAX_CHECKPOINT_EVERY = 1 << 40     # run --checkpoint-every (CLI::Range(0, 2^40))
MAX_SEED = (1 << 64) - 1           # seed: a uint64_t (sim/engine/config.hpp)
MAX_WORKERS = 1 << 20              # cluster.workers (sim/cluster/cluster.cpp)
MAX_STEPS = 1 << 32                # steps (sim/engine/config.cpp)
MAX_JSON_DEPTH = 64                # kMaxJsonDepth (sim/engine/config.hpp)

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxdict = _REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = 6


def short_repr(value):
    """``repr(value)`` bounded in length and depth (a 100 000-deep dict, or an object whose
    ``__repr__`` raises, still gives a few words)."""
    try:
        return _REPR.repr(value)
    except Exception:  # a user's __repr__ that raises: the type is enough
        return f"<{type(value).__name__} object>"


def _fail(name, value, rule, shown=None):
    shown = short_repr(value) if shown is None else shown
    raise ConfigError(f"{name} = {shown}: {rule}", field=name, value=shown, rule=rule)


def integer(name, value, low, high, rule=None):
    """``value`` as an int in [low, high]: any ``operator.index``-able integer (int, numpy's
    integers, a 0-d integer tensor); ``bool`` and floats (even 2.0) refused."""
    rule = rule or f"must be an integer from {low} to {high}"
    if isinstance(value, bool) or _is_bool_scalar(value):
        _fail(name, value, rule + " (not a bool)")
    try:
        n = operator.index(value)
    except TypeError:
        _fail(name, value, rule)
    if not low <= n <= high:
        _fail(name, value, rule)
    return n


def _is_bool_scalar(value):
    """numpy.bool_ or a bool tensor: not an integer here, as ``bool`` is not."""
    dtype = getattr(value, "dtype", None)
    return dtype is not None and str(dtype) in ("bool", "torch.bool")


def threads(value, name="threads"):
    """0 (leave OpenMP's count alone) or the CLI's ``--threads`` range, 1 to 1024."""
    return integer(name, value, 0, MAX_THREADS,
                   f"must be an integer from 1 to {MAX_THREADS}, or 0 for the default (more "
                   f"than the machine's cores only slows a run down)")


def jobs(value):
    """0 (the machine's cores) or the CLI's ``--jobs`` range, 1 to 1024."""
    return threads(value, name="jobs")


def checkpoint_every(value):
    """The CLI's ``--checkpoint-every`` range, 0 (never) to 2^40."""
    return integer("checkpoint_every", value, 0, MAX_CHECKPOINT_EVERY,
                   f"must be an integer from 0 (no checkpoints) to 2^40")


def seed(value):
    """An experiment's ``seed``: an integer from 0 to 2^64 - 1 (a uint64)."""
    return integer("seed", value, 0, MAX_SEED, "must be an integer from 0 to 2^64 - 1")


def workers(value):
    """``cluster.workers``: an integer from 1 to 2^20."""
    return integer("workers", value, 1, MAX_WORKERS, "must be an integer from 1 to 2^20")


def steps(value):
    """``steps``: an integer from 1 to 2^32."""
    return integer("steps", value, 1, MAX_STEPS, "must be an integer from 1 to 2^32")


def worker_index(value, count, name="worker"):
    """A worker's index: an integer in [0, count)."""
    return integer(name, value, 0, count - 1, f"must be an int in [0, {count}) (any integer type)")


def path(name, value, *, optional=False):
    """A file or folder argument as ``str``: a ``str`` or ``os.PathLike`` (``bytes`` paths
    are decoded as the file system does), not empty and without NUL characters.
    ``None`` is returned as ``None`` when ``optional``."""
    if value is None and optional:
        return None
    try:
        text = os.fspath(value)
    except TypeError:
        _fail(name, value, "must be a path (a str or os.PathLike)")
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not isinstance(text, str):
        _fail(name, value, "must be a path (a str or os.PathLike)")
    if not text:
        _fail(name, value, "must be a non-empty path")
    if "\0" in text:
        _fail(name, value, "must be a path without NUL characters")
    return text


def _number(where, value):
    """A JSON number from a Python, numpy or 0-d torch number; NaN and inf refused."""
    if isinstance(value, numbers.Integral):
        n = int(value)
        if not -(1 << 63) <= n <= MAX_SEED:
            _fail(where, value, "is outside the 64-bit integer range bitlab reads (from -2^63 "
                                "to 2^64 - 1; a larger JSON integer would be read as a rounded "
                                "float)")
        return n
    number = float(value)
    if not math.isfinite(number):
        _fail(where, value, f"must be a finite number ({number} is not a JSON value)")
    return number


def _scalar(value):
    """numpy scalars and 0-d arrays or tensors as Python scalars; anything else unchanged."""
    item = getattr(value, "item", None)
    if item is None or isinstance(value, (str, bytes, dict, list, tuple)):
        return value
    shape = getattr(value, "shape", None)
    if shape is not None and tuple(shape) != ():
        return value
    try:
        return item()
    except Exception:
        return value


def to_json(value, where, depth=0):
    """``value`` as plain JSON data (dict with str keys, list, str, int, float, bool,
    None), checked: a set, an object, a non-str key, NaN or inf, or nesting deeper than
    64 levels raises :class:`ConfigError` naming ``where`` (the path, ``optimizer.lr``)
    and the value. Tuples become lists, numpy and 0-d torch scalars numbers,
    ``os.PathLike`` a str."""
    if depth > MAX_JSON_DEPTH:
        _fail(where, value, f"is nested deeper than {MAX_JSON_DEPTH} levels; bitlab's "
                            f"experiments are at most a few levels deep", shown="...")
    if value is None or isinstance(value, (bool, str)):
        return value
    value = _scalar(value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Real):
        return _number(where, value)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                _fail(f"{where}[{short_repr(key)}]", item,
                      f"a key of type {type(key).__name__} is not a JSON key (keys are str)")
            out[key] = to_json(item, f"{where}.{key}" if where else key, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [to_json(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    name = type(value).__name__
    kind = {set: "a set", frozenset: "a frozenset", bytes: "bytes",
            complex: "a complex number"}.get(type(value),
                                             f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}")
    _fail(where or "experiment", value, f"{kind} is not a JSON value")


def to_json_text(value, where):
    """:func:`to_json`'s result as JSON text (what the C++ core parses)."""
    return json.dumps(to_json(value, where), allow_nan=False)


def string_list(name, value):
    """``set=`` / ``unset=``: None, or a list (or tuple) of str."""
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        _fail(name, value, 'must be a list of str (e.g. ["optimizer.lr=0.01"])')
    for i, item in enumerate(value):
        if not isinstance(item, str):
            _fail(f"{name}[{i}]", item, "must be a str")
    return list(value)


def flag(name, value):
    """A yes/no argument: a bool (numpy's too); ints and strings refused (``"False"`` is
    true in Python, so silently taking it would do the opposite of what was meant)."""
    if isinstance(value, bool) or _is_bool_scalar(value) and getattr(value, "shape", ()) == ():
        return bool(value)
    _fail(name, value, "must be True or False")


@contextlib.contextmanager
def naming(argument, path_text):
    """bitlab's reader's ConfigError, with ``argument path:`` in front when its message does
    not name the file (``(experiment) = [1,2]: an experiment must be a JSON object``)."""
    try:
        yield
    except ConfigError as e:
        if path_text in e.message:
            raise
        raise ConfigError(f"{argument} {path_text}: {e.message}", field=e.field, value=e.value,
                          rule=e.rule) from None
