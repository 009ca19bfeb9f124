"""What bitlab's functions return: a results folder read back, lazily."""

import json
import os

__all__ = ["Result", "SweepResult", "CostResult"]


def _read_csv(path):
    import pandas as pd
    return pd.read_csv(path)


class Result:
    """One run's results folder (``bitlab run``'s, or a bitlab.torch Simulation's).

    ``path`` the folder; ``metrics`` metrics.csv and ``comm_log`` comm_log.csv
    as pandas DataFrames; ``summary`` summary.json and ``config`` config.json
    as dicts; ``status`` "completed", "diverged", "interrupted" or "failed";
    ``exit_status`` what ``bitlab run`` would have exited with.
    """

    def __init__(self, path, exit_status=None):
        self.path = os.fspath(path)
        self.exit_status = exit_status

    def _file(self, name):
        return os.path.join(self.path, name)

    @property
    def metrics(self):
        return _read_csv(self._file("metrics.csv"))

    @property
    def comm_log(self):
        return _read_csv(self._file("comm_log.csv"))

    @property
    def summary(self):
        path = self._file("summary.json")
        if not os.path.exists(path):
            return {}
        with open(path) as f:
            return json.load(f)

    @property
    def config(self):
        with open(self._file("config.json")) as f:
            return json.load(f)

    @property
    def status(self):
        return self.summary.get("status", "running")

    def __repr__(self):
        return f"Result({self.path!r}, status={self.status!r})"


class SweepResult:
    """A sweep folder: ``table`` (sweep.csv), ``runs`` (a Result per run folder)."""

    def __init__(self, path, exit_status=None):
        self.path = os.fspath(path)
        self.exit_status = exit_status

    @property
    def table(self):
        return _read_csv(os.path.join(self.path, "sweep.csv"))

    @property
    def runs(self):
        names = sorted(d for d in os.listdir(self.path)
                       if os.path.isfile(os.path.join(self.path, d, "config.json")))
        return [Result(os.path.join(self.path, d)) for d in names]

    @property
    def summary(self):
        with open(os.path.join(self.path, "sweep.json")) as f:
            return json.load(f)

    def __repr__(self):
        return f"SweepResult({self.path!r}, exit_status={self.exit_status})"


class CostResult:
    """``bitlab cost``'s report: ``summary`` (dict), ``phases`` (DataFrame), ``str()`` the table."""

    def __init__(self, report):
        self._text = report.pop("text", "")
        self.summary = report
        self.path = None

    @property
    def phases(self):
        import pandas as pd
        rows = self.summary.get("phases", [])
        if isinstance(rows, dict):
            rows = [{"phase": k, **v} for k, v in rows.items()]
        return pd.DataFrame(rows)

    def __str__(self):
        return self._text

    def __repr__(self):
        return f"CostResult({sorted(self.summary)})"
