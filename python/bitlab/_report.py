"""What a :class:`bitlab.torch.Simulation` says about itself, as ``bitlab run`` does.

- the start: the run, bitlab's memory estimate and the memory available;
- the time a step takes, once the first steps are timed, split into torch's
  part (forward, backward, your data: everything outside bitlab's calls) and
  bitlab's (the gradients' hand-in, the exchange and the update), and what
  the whole run will take (:class:`Plan`, also ``sim.plan()``);
- a progress bar with steps/s and the ETA, on an interactive stderr (a
  terminal or a notebook), off in a log file or when asked (``progress=False``);
- the warning that OpenMP spins (``import torch`` came before ``import bitlab``);
- "did you mean" for a keyword a function does not take.
"""

import difflib
import functools
import inspect
import sys
import time
import warnings

from ._errors import ConfigError

__all__ = ["KeywordError", "suggest_keywords", "interactive", "ProgressBar", "Plan",
           "StepClock", "human_bytes", "warn_if_spinning"]


class KeywordError(ConfigError, TypeError):
    """A keyword argument the function does not take: a :class:`ConfigError` (bad input,
    named) that is still the ``TypeError`` Python raises for it."""


def suggest_keywords(function):
    """Wraps ``function`` so that an unknown keyword raises :class:`KeywordError` with the
    closest known name ("did you mean 'workers'?") instead of Python's bare TypeError."""
    signature = inspect.signature(function)
    known = [name for name, p in signature.parameters.items()
             if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and not name.startswith("_")
             and name not in ("self", "cls")]
    takes_any = any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values())

    @functools.wraps(function)
    def checked(*args, **kwargs):
        if not takes_any:
            for key in kwargs:
                if key not in signature.parameters:
                    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
                    hint = (f"did you mean {close[0]!r}?" if close
                            else f"it takes {', '.join(known)}")
                    where = function.__qualname__.replace(".__init__", "")
                    raise KeywordError(f"{where}({key}=...): unknown keyword; {hint}",
                                       field=key, value="...",
                                       rule=f"unknown keyword; {hint}")
        return function(*args, **kwargs)
    return checked


def interactive(stream=None):
    """Whether ``stream`` (default: stderr) is read by a person now: a terminal, or a
    Jupyter/IPython kernel's output (shown in the notebook)."""
    stream = sys.stderr if stream is None else stream
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):
        return False
    return "ipykernel" in sys.modules


def human_bytes(n):
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000.0
    return f"{n} B"


def _human_seconds(s):
    if s < 1:
        return f"{s * 1000:.3g} ms"
    if s < 120:
        return f"{s:.3g} s"
    if s < 7200:
        return f"{s / 60:.3g} min"
    return f"{s / 3600:.3g} h"


class StepClock:
    """Each step's wall time and the part of it spent in bitlab's calls.

    A step runs from the end of the previous ``step()`` (or the first block's entry) to the
    end of its own ``step()``; bitlab's part is the wall time inside its calls (each
    gradient's hand-in, ``step()``'s exchange and update), less the time ``evaluate`` takes
    there (your model's)."""

    def __init__(self):
        self.steps = []            # (wall_s, bitlab_s), one per step timed
        self._start = None
        self._bitlab_s = 0.0

    def begin(self):
        if self._start is None:
            self._start = time.perf_counter()

    def add_bitlab(self, seconds):
        self._bitlab_s += seconds

    def end(self):
        now = time.perf_counter()
        if self._start is not None:
            self.steps.append((now - self._start, min(self._bitlab_s, now - self._start)))
        self._start, self._bitlab_s = now, 0.0

    def typical(self):
        """(wall_s, bitlab_s) of a typical step: the mean of those after the first (which
        pays for first-touch memory and torch's warm-up) when there are any."""
        timed = self.steps[1:] if len(self.steps) > 1 else self.steps
        if not timed:
            return None
        return (sum(w for w, _ in timed) / len(timed), sum(b for _, b in timed) / len(timed))


class Plan:
    """What the steps timed so far say about the whole run: ``step_s`` (a typical step's
    wall time), ``total_s`` (the run's ``steps``), ``remaining_s``, ``torch_share`` and
    ``bitlab_share`` (of a step's time), ``memory_bytes`` (bitlab's estimate) and
    ``available_bytes``; ``str(plan)`` says it in a line."""

    def __init__(self, step_s, bitlab_s, steps, steps_done, timed, memory_bytes,
                 available_bytes):
        self.step_s = step_s
        self.steps, self.steps_done, self.steps_timed = steps, steps_done, timed
        self.total_s = step_s * steps
        self.remaining_s = step_s * (steps - steps_done)
        self.bitlab_share = bitlab_s / step_s if step_s > 0 else 0.0
        self.torch_share = 1.0 - self.bitlab_share
        self.memory_bytes, self.available_bytes = memory_bytes, available_bytes

    def __str__(self):
        text = (f"≈ {_human_seconds(self.step_s)} a step, ≈ {_human_seconds(self.total_s)} for "
                f"{self.steps} steps")
        if 0 < self.steps_done < self.steps:
            text += f" ({_human_seconds(self.remaining_s)} left)"
        text += (f", torch {100 * self.torch_share:.0f} %, bitlab {100 * self.bitlab_share:.0f} % "
                 f"(timed over {self.steps_timed} step{'s' if self.steps_timed != 1 else ''})")
        return text

    def __repr__(self):
        return f"<bitlab.torch plan: {self}>"


class ProgressBar:
    """``[#####...] 12/100 steps  3.4 steps/s  ETA 26 s`` on ``stream``, redrawn at most ten
    times a second (as ``bitlab run``'s, sim/engine/run_parts.hpp's Progress)."""

    WIDTH = 24

    def __init__(self, total, done, stream=None):
        self.total, self.first = total, done
        self.stream = sys.stderr if stream is None else stream
        self.start = self.last = time.perf_counter()
        self.shown = False

    def update(self, step):
        now = time.perf_counter()
        if step < self.total and now - self.last < 0.1:
            return
        self.last = now
        elapsed = now - self.start
        rate = (step - self.first) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - step) / rate if rate > 0 else 0.0
        filled = self.WIDTH * step // max(self.total, 1)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self.stream.write(f"\r[{bar}] {step}/{self.total} steps  {rate:.3g} steps/s  "
                          f"ETA {_human_seconds(eta)}\033[K")
        self.stream.flush()
        self.shown = True

    def close(self):
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
            self.shown = False

    def say(self, line):
        """A line above the bar (the bar is redrawn at the next update)."""
        self.stream.write(("\r\033[K" if self.shown else "") + line + "\n")
        self.stream.flush()


_SPIN_WARNED = False


def warn_if_spinning(policy, threads, stacklevel=3):
    """Once a process: the warning that OpenMP's threads spin, with the fix, when they do
    and more than one thread runs (one thread never waits for another)."""
    global _SPIN_WARNED
    if _SPIN_WARNED or not policy.startswith("spin") or threads <= 1:
        return False
    _SPIN_WARNED = True
    warnings.warn(
        "bitlab: OpenMP's threads spin while they wait (libgomp's default): torch was imported "
        "before bitlab, and libgomp reads OMP_WAIT_POLICY only when it loads. On a busy machine "
        "that made runs 3.7-16x slower (docs/building.md, \"A busy machine\"). Fix: import "
        "bitlab first (`import bitlab.torch` above `import torch`), or start the script with "
        "OMP_WAIT_POLICY=passive (OMP_WAIT_POLICY=passive python3 script.py)",
        SpinWarning, stacklevel=stacklevel)
    return True


class SpinWarning(RuntimeWarning):
    """OpenMP's threads spin while they wait: slow on a busy machine (the fix is in the
    message)."""
