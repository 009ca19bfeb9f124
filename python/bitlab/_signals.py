"""SIGTERM and SIGHUP while a :class:`bitlab.torch.Simulation` is open, as ``bitlab run``.

Slurm sends SIGTERM at a job's time limit or on preemption, a closed terminal SIGHUP;
Python's default for both is to die at once (no summary, ``.bitlab.lock`` left, the steps
since the last checkpoint lost). While a Simulation is open, bitlab's handler asks the run
to stop after the step in flight, as the CLI's does (sim/engine/run_steps.cpp,
on_stop_signal; under MPI every rank then stops at the same step): ``sim.step()`` finishes
that step, writes the checkpoint (with ``checkpoint_every``) and summary.json
("interrupted", naming the signal), releases the lock and raises :class:`Interrupted`,
which ends the script with the CLI's exit status (143 for SIGTERM, 129 for SIGHUP) unless
caught. A handler of your own, or an ignored signal (``nohup``), is left in place.
Handlers can only be set from the main thread: a Simulation made in another thread leaves
them alone.
"""

import signal
import threading

from . import _bitlab

__all__ = ["Interrupted", "hold", "release", "requested", "answered", "signal_name"]

_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_held = 0
_previous = {}
_answered = False  # a Simulation has raised Interrupted for the signal received


class Interrupted(SystemExit):
    """The run stopped for SIGTERM or SIGHUP after its step in flight; its summary.json
    ("interrupted") and checkpoint are written and its lock released. A ``SystemExit``
    whose ``code`` is the CLI's exit status (128 + the signal): uncaught, the script ends
    with it. ``signal`` is the signal's name, ``path`` the run folder, ``steps_done`` the
    steps written."""

    def __init__(self, signum, path, steps_done, message):
        super().__init__(128 + signum)
        self.signal, self.path, self.steps_done, self.message = (
            signal_name(signum), path, steps_done, message)

    def __str__(self):
        return self.message


def signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _on_stop_signal(signum, frame):
    _bitlab.request_stop(signum)


def hold():
    """Installs bitlab's handler (once for every open Simulation); False where it cannot
    (not the main thread, or a core without stop requests)."""
    global _held, _answered
    if threading.current_thread() is not threading.main_thread() or not hasattr(
            _bitlab, "request_stop"):
        return False
    if _held == 0:
        _answered = False
        _previous.clear()
        for sig in _SIGNALS:
            current = signal.getsignal(sig)
            if current is signal.SIG_DFL:  # yours, or an ignored one, stays
                _previous[sig] = current
                signal.signal(sig, _on_stop_signal)
    _held += 1
    return True


def release():
    """Undoes one :func:`hold`; the last puts the previous handlers back. A signal received
    that no Simulation acted on (it came after the last step) is then delivered again, so
    the process ends as it would have without bitlab, once the summaries are written."""
    global _held
    if _held == 0:
        return
    _held -= 1
    if _held == 0:
        caught = list(_previous)
        for sig, handler in _previous.items():
            if signal.getsignal(sig) is _on_stop_signal:
                signal.signal(sig, handler)
        _previous.clear()
        pending = requested()
        if pending in caught and not _answered:
            signal.raise_signal(pending)


def answered():
    """A Simulation is raising :class:`Interrupted` for the signal received."""
    global _answered
    _answered = True


def requested():
    """The stop signal received since the run started (its number), 0 if none."""
    return _bitlab.stop_requested() if hasattr(_bitlab, "stop_requested") else 0
