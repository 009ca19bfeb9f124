#!/usr/bin/python3
"""Loss curves of bitlab runs: against steps, simulated time and bytes sent.

Usage (also through `bitlab plot`, which runs this script with /usr/bin/python3):

    plot.py DIR... [--metric M] [--x step|sim_time_s|bytes_sent_cum|all|COLUMN]
                   [--out PREFIX] [--title T] [--logy]

A DIR is a run folder (it holds metrics.csv), a sweep folder (it holds sweep.csv, whose
`dir` column names the run folders) or any folder with run folders below it (searched
three levels deep). All the runs found are drawn on one figure, one panel per x axis.

Curves are labelled by the configuration values that differ between the runs: each run's
config.json is flattened to path=value and the paths whose values differ (seed, name and
description excepted) name the curve, e.g. `lr=0.01, workers=16`. Runs that differ only by
seed form one curve: the mean over seeds, with a band from the minimum to the maximum. The
runs of a group are aligned by step; the x value of a grouped point is the mean of its
runs' x values (bytes are equal across seeds; simulated time with jitter is not). A run that
stopped early (diverged, interrupted) counts only at the steps it has; non-finite values
are left out. Eval metrics (eval_loss, ...) are only filled at eval steps: only those rows
are drawn.

Writes PREFIX.png and PREFIX.svg (default: DIR/plot for train_loss, DIR/plot-METRIC for
another metric, DIR being the first one given) and prints their paths.

Exit status: 0 done; 2 bad input (no runs found, a metric or x column the runs lack) or
matplotlib missing; 1 anything else. Input is checked before matplotlib is imported, so
those messages need no matplotlib. Only the standard library and matplotlib are used.
"""

import argparse
import csv
import json
import math
import os
import sys

PYTHON = "/usr/bin/python3"
MATPLOTLIB_MISSING = (
    "matplotlib is not installed for /usr/bin/python3: install the Debian package "
    "python3-matplotlib (apt-get install python3-matplotlib)")
X_AXES = ("step", "sim_time_s", "bytes_sent_cum")
X_LABELS = {
    "step": "step",
    "sim_time_s": "simulated time (s)",
    "bytes_sent_cum": "bytes sent per worker",
}
IGNORED_PATHS = ("seed", "name", "description")
SEARCH_DEPTH = 3


class InputError(Exception):
    """Bad input: reported as `plot: error: ...` with exit status 2."""


def note(message):
    print("plot: note: " + message, file=sys.stderr)


# ---------------------------------------------------------------- finding runs


def is_run(path):
    return os.path.isfile(os.path.join(path, "metrics.csv"))


def runs_below(folder, depth):
    """Run folders under `folder` (not itself), sorted, at most `depth` levels down."""
    found = []
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        return found
    for entry in entries:
        sub = os.path.join(folder, entry)
        if not os.path.isdir(sub):
            continue
        if is_run(sub):
            found.append(sub)
        elif depth > 1:
            found.extend(runs_below(sub, depth - 1))
    return found


def runs_of_sweep(folder):
    """(run folders named by folder/sweep.csv's `dir` column, its columns), or None."""
    path = os.path.join(folder, "sweep.csv")
    if not os.path.isfile(path):
        return None
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        columns = list(reader.fieldnames or [])
    if not rows or "dir" not in columns:
        return None
    found = []
    for row in rows:
        d = row.get("dir") or ""
        candidates = [d] if os.path.isabs(d) else [os.path.join(folder, d), d]
        run = next((c for c in candidates if d and is_run(c)), None)
        if run is None:
            note("sweep run %s (status %s) has no metrics.csv yet: left out"
                 % (row.get("run", d), row.get("status", "?")))
        else:
            found.append(run)
    return found, columns


def find_runs(dirs):
    """(every run folder in or below the given folders, each once, in the order found;
    the columns of the sweep.csv files read, or None if some runs came from no sweep.csv)."""
    runs, seen, sweep_columns = [], set(), set()
    for d in dirs:
        if not os.path.isdir(d):
            raise InputError("%s: no such folder" % d)
        sweep = None if is_run(d) else runs_of_sweep(d)
        if sweep is not None:
            found, columns = sweep
            if sweep_columns is not None:
                sweep_columns.update(columns)
        else:
            sweep_columns = None
            found = [d] if is_run(d) else runs_below(d, SEARCH_DEPTH)
        if not found:
            raise InputError(
                "%s: no runs found (a run folder holds metrics.csv; a sweep folder holds "
                "sweep.csv or run folders)" % d)
        for run in found:
            key = os.path.realpath(run)
            if key not in seen:
                seen.add(key)
                runs.append(run)
    return runs, sweep_columns


# ---------------------------------------------------------------- reading runs


def flatten(value, prefix=""):
    """{'a': {'b': 1}} -> {'a.b': 1}; lists stay whole (as JSON text)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(flatten(v, prefix + k + "."))
        return out
    if isinstance(value, list):
        return {prefix[:-1]: json.dumps(value)}
    return {prefix[:-1]: value}


def read_number(text):
    if text is None or text == "":
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


class Run:
    """One results folder: its flattened config and its metrics.csv columns."""

    def __init__(self, path):
        self.path = path
        config_path = os.path.join(path, "config.json")
        self.config = {}
        if os.path.isfile(config_path):
            with open(config_path) as f:
                self.config = flatten(json.load(f))
        with open(os.path.join(path, "metrics.csv"), newline="") as f:
            reader = csv.reader(f)
            self.columns = next(reader, [])
            self.rows = list(reader)

    def series(self, x, y):
        """{step: (x, y)} over the rows where both x and y hold finite numbers."""
        ix, iy, istep = (self.columns.index(c) for c in (x, y, "step"))
        out = {}
        for row in self.rows:
            if len(row) <= max(ix, iy, istep):
                continue
            s, vx, vy = read_number(row[istep]), read_number(row[ix]), read_number(row[iy])
            if s is not None and vx is not None and vy is not None:
                out[s] = (vx, vy)
        return out


# ---------------------------------------------------------------- labels and groups


def format_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, float):
        return "%g" % v
    return str(v)


def varying_paths(runs):
    """Config paths whose values differ between the runs, seed/name/description excepted.

    Paths every run has come first; paths only some runs have (an optimizer's own options
    when the optimizer is swept) are used only if nothing else tells the runs apart."""
    all_paths = []
    for r in runs:
        for p in r.config:
            if p not in all_paths and p not in IGNORED_PATHS:
                all_paths.append(p)
    common = [p for p in all_paths if all(p in r.config for r in runs)]
    differ_all = [p for p in all_paths
                  if len({json.dumps(r.config.get(p)) for r in runs}) > 1]
    paths = [p for p in differ_all if p in common]
    # Add a path only some runs have (0/1 Adam's local_step_clipper among Adam runs)
    # wherever it still tells runs apart: runs with different configs never share a curve.
    target = partition(runs, differ_all)
    for p in differ_all:
        if partition(runs, paths) == target:
            break
        if p not in paths and partition(runs, paths + [p]) != partition(runs, paths):
            paths.append(p)
    return paths


def short_names(paths):
    """The last component of each path (the section for `x.name`: optimizer=adam), or the
    whole path where two would clash."""
    last = [p.split(".")[-2] if p.endswith(".name") else p.split(".")[-1] for p in paths]
    return {p: (l if last.count(l) == 1 else p) for p, l in zip(paths, last)}


def sort_key(values):
    key = []
    for v in values:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            key.append((0, float(v), ""))
        else:
            key.append((1, 0.0, json.dumps(v)))
    return key


def partition(runs, paths):
    return sorted(sorted(i for i, r in enumerate(runs)
                         if json.dumps([r.config.get(p) for p in paths]) == key)
                  for key in {json.dumps([r.config.get(p) for p in paths]) for r in runs})


def group_runs(runs, sweep_columns=None):
    """[(label, [runs])], runs equal but for the seed grouped, sorted by swept values.

    With sweep.csv columns, the swept paths label the curves when they tell the same
    groups apart as the whole config does (sweeping optimizer.name also changes that
    optimizer's defaults, which would only clutter the labels)."""
    paths = varying_paths(runs)
    if sweep_columns:
        swept = [p for p in paths if p in sweep_columns]
        if swept and partition(runs, swept) == partition(runs, paths):
            paths = swept
    # Options of a section whose name differs (optimizer.name: adam vs onebit_adam) often
    # differ only through that choice's defaults: leave out those that tell no runs apart.
    for p in reversed(list(paths)):
        section = p.rsplit(".", 1)[0] if "." in p else None
        if section and not p.endswith(".name") and section + ".name" in paths:
            rest = [q for q in paths if q != p]
            if partition(runs, rest) == partition(runs, paths):
                paths = rest
    names = short_names(paths)
    groups = {}
    for r in runs:
        key = tuple(r.config.get(p) for p in paths)
        groups.setdefault(json.dumps(key), (key, []))[1].append(r)
    out = []
    for key, members in sorted(groups.values(), key=lambda g: sort_key(g[0])):
        if paths:
            label = ", ".join("%s=%s" % (names[p], format_value(v)) for p, v in zip(paths, key))
        elif len(groups) == 1:
            label = str(members[0].config.get("name") or os.path.basename(
                os.path.normpath(members[0].path)))
        else:
            label = os.path.basename(os.path.normpath(members[0].path))
        if len(members) > 1:
            label += " (%d seeds)" % len(members)
        out.append((label, members))
    if not paths and len(groups) > 1:
        note("the runs' configs are equal but for the seed, yet they were not grouped")
    return out


def group_curve(members, x, y):
    """Steps in order with mean x, mean/min/max y over the runs that have that step."""
    per_run = [r.series(x, y) for r in members]
    steps = sorted(set().union(*[s.keys() for s in per_run]))
    xs, mean, lo, hi = [], [], [], []
    for step in steps:
        pts = [s[step] for s in per_run if step in s]
        xs.append(sum(p[0] for p in pts) / len(pts))
        ys = [p[1] for p in pts]
        mean.append(sum(ys) / len(ys))
        lo.append(min(ys))
        hi.append(max(ys))
    return xs, mean, lo, hi


# ---------------------------------------------------------------- checks and drawing


def check_columns(runs, metric, x_choice):
    """The x axes to draw; InputError for a metric or x column the runs lack."""
    common = [c for c in runs[0].columns if all(c in r.columns for r in runs[1:])]
    numeric = [c for c in common if c not in ("phase", "wall_s")]
    if metric not in common:
        raise InputError(
            "metric %r is not in metrics.csv%s; available: %s"
            % (metric, "" if len(runs) == 1 else " of every run", ", ".join(numeric)))
    if x_choice != "all":
        if x_choice not in common:
            raise InputError(
                "x column %r is not in metrics.csv%s; available: %s"
                % (x_choice, "" if len(runs) == 1 else " of every run", ", ".join(numeric)))
        return [x_choice]
    axes = []
    for x in X_AXES:
        if x in common:
            axes.append(x)
        elif x == "sim_time_s":
            note("no sim_time_s column (a run without a network section): that panel is left "
                 "out")
        else:
            note("no %s column: that panel is left out" % x)
    if not axes:
        raise InputError("the runs' metrics.csv have none of the columns " + ", ".join(X_AXES))
    return axes


def import_matplotlib():
    try:
        import matplotlib
    except ImportError:
        print("plot: error: " + MATPLOTLIB_MISSING, file=sys.stderr)
        sys.exit(2)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter
    return plt, EngFormatter


def draw(groups, metric, axes, title, logy, prefix):
    plt, EngFormatter = import_matplotlib()
    fig, panels = plt.subplots(1, len(axes), figsize=(5.2 * len(axes), 4.2), sharey=True,
                               squeeze=False)
    panels = panels[0]
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    eval_like = not metric.startswith("train_loss") and metric != "grad_norm"
    handles = []
    for i, (label, members) in enumerate(groups):
        color = colors[i % len(colors)]
        for j, (panel, x) in enumerate(zip(panels, axes)):
            xs, mean, lo, hi = group_curve(members, x, metric)
            if not xs:
                continue
            sparse = eval_like or len(xs) < 30
            line, = panel.plot(xs, mean, color=color, linewidth=1.4,
                               marker="o" if sparse else None, markersize=3,
                               label=label if j == 0 else None)
            if len(members) > 1:
                panel.fill_between(xs, lo, hi, color=color, alpha=0.2, linewidth=0)
            if j == 0:
                handles.append(line)
    for panel, x in zip(panels, axes):
        panel.set_xlabel(X_LABELS.get(x, x))
        panel.grid(True, alpha=0.3)
        if logy:
            panel.set_yscale("log")
        if x.startswith("bytes"):
            panel.xaxis.set_major_formatter(EngFormatter(unit="B"))
        elif x.startswith("sim_time_s"):
            panel.xaxis.set_major_formatter(EngFormatter(unit="s"))
            panel.set_xlabel("simulated time" + x[len("sim_time_s"):])
    panels[0].set_ylabel(metric)
    banded = any(len(m) > 1 for _, m in groups)
    fig.suptitle(title + ("  (line: mean over seeds, band: min–max)" if banded else ""))
    if handles:
        fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.93),
                   fontsize="small", frameon=False)
    fig.tight_layout()
    paths = []
    for ext in ("png", "svg"):
        path = prefix + "." + ext
        fig.savefig(path, dpi=120, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


def default_title(runs, metric):
    names = []
    for r in runs:
        n = r.config.get("name")
        if n and n not in names:
            names.append(str(n))
    return (", ".join(names[:3]) + (", ..." if len(names) > 3 else "") + ": " if names
            else "") + metric


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="plot.py",
        description="Loss curves of bitlab runs against steps, simulated time and bytes sent "
                    "(PNG and SVG). Runs differing only by seed: mean line, min-max band.")
    parser.add_argument("dirs", nargs="+", metavar="DIR",
                        help="a run folder, a sweep folder or a folder of run folders")
    parser.add_argument("--metric", default="train_loss",
                        help="metrics.csv column on y (default train_loss; e.g. eval_loss, "
                             "train_loss_full, suboptimality)")
    parser.add_argument("--x", default="all",
                        help="x axis: step, sim_time_s, bytes_sent_cum, another metrics.csv "
                             "column, or all (default: one panel each for step, sim_time_s if "
                             "present, bytes_sent_cum)")
    parser.add_argument("--out", metavar="PREFIX",
                        help="write PREFIX.png and PREFIX.svg (default: FIRST_DIR/plot, or "
                             "FIRST_DIR/plot-METRIC for a metric other than train_loss)")
    parser.add_argument("--title", help="figure title (default: the runs' names and metric)")
    parser.add_argument("--logy", action="store_true", help="logarithmic y axis")
    args = parser.parse_args(argv)

    try:
        paths, sweep_columns = find_runs(args.dirs)
        runs = [Run(p) for p in paths]
        axes = check_columns(runs, args.metric, args.x)
        groups = group_runs(runs, sweep_columns)
        if not any(group_curve(m, axes[0], args.metric)[0] for _, m in groups):
            raise InputError("metric %r has no values in these runs" % args.metric)
        prefix = args.out or os.path.join(
            args.dirs[0], "plot" if args.metric == "train_loss" else "plot-" + args.metric)
        out_dir = os.path.dirname(prefix)
        if out_dir and not os.path.isdir(out_dir):
            raise InputError("--out %s: folder %s does not exist" % (prefix, out_dir))
    except InputError as e:
        print("plot: error: %s" % e, file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:  # unreadable files, malformed config.json
        print("plot: error: %s" % e, file=sys.stderr)
        return 2

    title = args.title or default_title(runs, args.metric)
    paths = draw(groups, args.metric, axes, title, args.logy, prefix)
    print("plot: %d runs in %d curves" % (len(runs), len(groups)), file=sys.stderr)
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
