#!/usr/bin/python3
"""Loss curves of bitlab runs: against steps, simulated time and bytes sent.

Usage (also through `bitlab plot`, which runs this script with /usr/bin/python3):

    plot.py DIR... [--metric M] [--x step|sim_time_s|bytes_sent_cum|all|COLUMN]
                   [--out PREFIX] [--title T] [--logx | --linx] [--logy]

A DIR is a run folder (it holds metrics.csv), a sweep folder (it holds sweep.csv, whose
`dir` column names the run folders) or any folder with run folders below it (searched
three levels deep). All the runs found are drawn on one figure, one panel per x axis.

Curves are labelled by the configuration values that differ between the runs: each run's
config.json is flattened to path=value and the paths whose values differ (seed, name and
description excepted) name the curve as a person writes them: `lr=0.01, workers=16`, an
optimizer's name bare (`adam`), a stage's compressor by its name (`4-bit`, `1-bit (sign)`,
`top-k 10 %`), values a run lacks (another optimizer's options) left out; a sweep that zips
distinct descriptions with its settings (experiments/compression-axis) is labelled by
them. Runs that differ only by
seed form one curve: the mean over seeds, with a band from the minimum to the maximum. The
runs of a group are aligned by step; the x value of a grouped point is the mean of its
runs' x values (bytes are equal across seeds; simulated time with jitter is not). A run that
stopped early (diverged, interrupted) counts only at the steps it has; non-finite values
are left out. Eval metrics (eval_loss, ...) are only filled at eval steps: only those rows
are drawn. A sweep's run is labelled by its values as the sweep file wrote them
(sweep.json's assignments), with what they resolved to beside them where they differ
(`freeze_step=15% (step 90)`). The bytes axis is logarithmic when a run changes phase
(--logx: every x axis, --linx: none).

Writes PREFIX.png and PREFIX.svg (default: DIR/plot for train_loss, DIR/plot-METRIC for
another metric, DIR being the first one given) and prints their paths.

Exit status (bitlab_files.py): 0 done; 2 bad input (no runs found, a metric or x column
the runs lack, a run's file that is not UTF-8 text, valid csv or JSON, a summary.json field
of the wrong type) or matplotlib missing, with one line `bitlab: error: <file>: <what>`;
4 a figure that cannot be written (naming it and the system's reason); 1 a bug. Input is
checked before matplotlib is imported, so those messages need no matplotlib. Only the
standard library and matplotlib are used.
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bitlab_files import (InputError, check_fields, check_out_folder,  # noqa: E402
                          read_csv_dicts, read_csv_rows, read_json_object, read_text,
                          run_main, write_atomic, write_stdout)

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
    rows, columns = read_csv_dicts(path)
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


# The summary.json fields the tools read, and their kinds (bitlab_files.check_fields).
NUMBER = "a number or null"
SUMMARY_FIELDS = {
    "status": "a string", "steps_completed": "an integer", "steps_planned": "an integer",
    "wall_s": NUMBER, "final": {"*": NUMBER},
    "totals": {"bytes_sent_per_worker": NUMBER},
    "time": {"sim_time_s": NUMBER, "compute_s": NUMBER},
    "phases": {"*": {"steps": NUMBER, "bytes_sent_per_worker": NUMBER, "comm_s": NUMBER}},
    "baseline": {"speedup": NUMBER, "bytes_ratio": NUMBER, "gap": {"*": NUMBER}},
}


SWEEP_ASSIGNMENTS = {}  # sweep folder -> {run folder name: flattened assignments}


def written_values(run_path):
    """The values the sweep file gave this run (sweep.json's "assignments" beside the run
    folder), flattened to config paths; {} for a run that is not a sweep's."""
    folder = os.path.dirname(os.path.abspath(run_path))
    if folder not in SWEEP_ASSIGNMENTS:
        by_dir = {}
        sweep_json = os.path.join(folder, "sweep.json")
        if os.path.isfile(sweep_json):
            try:
                runs = read_json_object(sweep_json).get("runs")
            except InputError:
                runs = None  # the tools read runs, not sweep.json: no labels from it
            for r in runs if isinstance(runs, list) else []:
                if isinstance(r, dict) and isinstance(r.get("assignments"), dict):
                    by_dir[str(r.get("dir"))] = flatten(r["assignments"])
        SWEEP_ASSIGNMENTS[folder] = by_dir
    return SWEEP_ASSIGNMENTS[folder].get(os.path.basename(os.path.abspath(run_path)), {})


class Run:
    """One results folder: its flattened config, its metrics.csv columns and rows and its
    summary.json (InputError naming the file where one is not what a run writes)."""

    def __init__(self, path):
        self.path = path
        config_path = os.path.join(path, "config.json")
        self.config = {}
        if os.path.isfile(config_path):
            self.config = flatten(read_json_object(config_path))
        # A sweep's run: its swept values as the sweep file wrote them ("15%"), by path.
        self.written = written_values(path)
        metrics_path = os.path.join(path, "metrics.csv")
        text = read_text(metrics_path)
        if text and not text.endswith("\n"):
            # A row cut off by a kill mid-write: its numbers may be truncated, so it is
            # left out rather than drawn.
            text = text[:text.rfind("\n") + 1]
            note("%s: metrics.csv ends in a torn row: left out" % path)
        rows = read_csv_rows(text, metrics_path)
        self.columns = rows[0] if rows else []
        self.rows = rows[1:]
        if self.columns and "step" not in self.columns:
            raise InputError("%s: no step column (its columns: %s)"
                             % (metrics_path, ", ".join(self.columns)))
        self.summary = {}
        summary_path = os.path.join(path, "summary.json")
        if os.path.isfile(summary_path):
            self.summary = read_json_object(summary_path)
            check_fields(self.summary, SUMMARY_FIELDS, summary_path)
        self.status = self.summary.get("status", "unfinished")
        if self.status in UNFINISHED:
            note("%s: %s: drawn up to its last step and marked as unfinished"
                 % (path, self.status))

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


# Compressors of the compressed allreduce's stages (`bitlab list`), as a person names them:
# the compressor's usual name from its main option. Other options the user wrote are
# appended as key=value where they differ between the curves.
COMPRESSOR_STAGES = ("worker_compressor", "server_compressor")
COMPRESSOR_MAIN = {"nbit": "bits", "topk": "ratio", "randomk": "ratio"}


def compressor_phrase(name, options, varying):
    """'1-bit (sign)', '4-bit', 'top-k 10 %', 'random-k 10 %, rescaled, no error feedback'
    for one stage's compressor (options: its flattened keys; varying: the keys that differ
    between curves)."""
    if name == "sign":
        text = "1-bit (sign)"
    elif name == "nbit" and is_number(options.get("bits")):
        text = "%s-bit" % format_value(options["bits"])
    elif name in ("topk", "randomk") and is_number(options.get("ratio")):
        text = "%s %s %%" % ("top-k" if name == "topk" else "random-k",
                             format_value(100.0 * options["ratio"]))
    elif name == "identity":
        text = "fp32 (identity)"
    else:
        text = str(name)
    extra = []
    for key, value in options.items():
        if key in ("name", COMPRESSOR_MAIN.get(name)) or value is None:
            continue
        if key == "error_feedback":
            if value is False:
                extra.append("no error feedback")
        elif key == "rescale":
            if value is True:
                extra.append("rescaled")
        elif key in varying:
            extra.append("%s=%s" % (key, format_value(value)))
    return ", ".join([text] + extra)


def person_label(run, paths, names, varying_all):
    """A curve's label as a person writes it: the values of the varying paths, an
    optimizer's name bare (adam), a stage's compressor by its name ('4-bit', '1-bit
    (sign)'), values a run does not have (null: an option of another optimizer) left out,
    never `worker_compressor=null, ratio=null`."""
    parts, stages = [], {}
    compression, compression_none = None, False
    for p in paths:
        v = run.config.get(p)
        stage = next((s for s in COMPRESSOR_STAGES if "." + s + "." in "." + p), None)
        if stage is not None:
            section = p[:p.index(stage) + len(stage)]
            stages.setdefault(section, None)
            continue
        if v is None:
            continue
        if p.endswith(".compression"):  # "none": the uncompressed twin; else said below
            compression_none = v == "none"
            compression = "compression %s" % format_value(v)
            parts.append(compression)
        elif p.endswith(".name") or p == "name":
            parts.append(format_value(v))
        else:
            parts.append("%s=%s" % (names[p], as_written(run, p, v)))
    phrases = {}
    for section in stages:
        name = run.config.get(section + ".name")
        if name is None or compression_none:  # no compressor, or one that is not used
            continue
        options = {k[len(section) + 1:]: v for k, v in run.config.items()
                   if k.startswith(section + ".")}
        varying = {k[len(section) + 1:] for k in varying_all if k.startswith(section + ".")}
        phrases[section.rsplit(".", 1)[-1]] = compressor_phrase(name, options, varying)
    if phrases and compression is not None and not compression_none:
        parts.remove(compression)  # the compressor's name says it
    if len(set(phrases.values())) == 1:
        parts.append(next(iter(phrases.values())))
    else:
        parts += ["%s %s" % (s.split("_")[0], phrases[s]) for s in COMPRESSOR_STAGES
                  if s in phrases]
    return ", ".join(parts)


def as_written(run, path, value):
    """A value as the sweep file wrote it, with what it resolved to beside it where they
    differ: freeze_step=15% (step 90); else as format_value writes it."""
    written = run.written.get(path)
    if written is None or json.dumps(written) == json.dumps(value):
        return format_value(value)
    return "%s (%s%s)" % (format_value(written), "step " if path.endswith("_step") else "= ",
                          format_value(value))


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
    """([Group], varying paths, their short names): runs equal but for the seed grouped,
    sorted by swept values.

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
    described = descriptions(groups.values())
    varying_all = set(varying_paths_all(runs))
    out = []
    for key, members in sorted(groups.values(), key=lambda g: sort_key(g[0])):
        if described:
            label = str(members[0].config["description"])
        elif paths:
            label = person_label(members[0], paths, names, varying_all) or ", ".join(
                "%s=%s" % (names[p], format_value(v)) for p, v in zip(paths, key))
        elif len(groups) == 1:
            label = str(members[0].config.get("name") or os.path.basename(
                os.path.normpath(members[0].path)))
        else:
            label = os.path.basename(os.path.normpath(members[0].path))
        if len(members) > 1:
            label += " (%d seeds)" % len(members)
        out.append(Group(label, members, dict(zip(paths, key))))
    if not paths and len(groups) > 1:
        note("the runs' configs are equal but for the seed, yet they were not grouped")
    return out, paths, names


def varying_paths_all(runs):
    """Every config path whose value differs between the runs (None where absent)."""
    paths = {p for r in runs for p in r.config}
    return [p for p in paths if len({json.dumps(r.config.get(p)) for r in runs}) > 1]


def descriptions(groups):
    """True when each group's runs share a description and the descriptions tell the groups
    apart (a sweep that zips "description" with the settings, as
    experiments/compression-axis does): then they are the curves' labels."""
    texts = []
    for _, members in groups:
        d = {json.dumps(r.config.get("description")) for r in members}
        if len(d) != 1 or not isinstance(members[0].config.get("description"), str) \
                or not members[0].config["description"].strip():
            return False
        texts.append(members[0].config["description"])
    return len(texts) > 1 and len(set(texts)) == len(texts)


class Group:
    """One curve: runs equal but for the seed, and the values of the varying paths."""

    def __init__(self, label, members, values):
        self.label, self.members, self.values = label, members, values

    def __iter__(self):  # (label, members), as the callers unpack it
        return iter((self.label, self.members))


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
        raise InputError(MATPLOTLIB_MISSING) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return matplotlib, plt


# ---------------------------------------------------------------- filtering and smoothing


def parse_where(items, runs):
    """--where PATH=VALUE filters: {full path: [accepted values]}. PATH is a config path
    (optimizer.freeze_step) or its unique last part (freeze_step); VALUE is JSON (0, 0.01,
    true, "adam") or plain text. A path given twice accepts either value."""
    paths = sorted({p for r in runs for p in r.config})
    filters = {}
    for item in items:
        if "=" not in item:
            raise InputError("--where %r: expected PATH=VALUE, e.g. optimizer.freeze_step=120"
                             % item)
        path, text = item.split("=", 1)
        matches = [p for p in paths if p == path] or [
            p for p in paths if p.endswith("." + path) or p.split(".")[-1] == path]
        if len(matches) != 1:
            raise InputError("--where %s: %s config path %r; the runs' paths are: %s"
                             % (item, "no" if not matches else "more than one", path,
                                ", ".join(matches or paths)))
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        filters.setdefault(matches[0], []).append(value)
    return filters


def same_value(a, b):
    number = (int, float)
    if isinstance(a, number) and isinstance(b, number) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return float(a) == float(b)
    return a == b


def apply_where(runs, filters):
    kept = [r for r in runs
            if all(any(same_value(r.config.get(p), v) for v in values)
                   for p, values in filters.items())]
    if filters and not kept:
        raise InputError("--where leaves no runs (%s)" % "; ".join(
            "%s in %s" % (p, json.dumps(v)) for p, v in filters.items()))
    return kept


def ema(values, span):
    """Exponential moving average over points, alpha = 2 / (span + 1), started at the
    first value (pandas' ewm(span=..., adjust=False))."""
    if span <= 1 or not values:
        return list(values)
    alpha = 2.0 / (span + 1.0)
    out, acc = [], values[0]
    for v in values:
        acc = alpha * v + (1 - alpha) * acc
        out.append(acc)
    return out


# ---------------------------------------------------------------- curves, blow-ups, styles

# A curve "blew up" where its metric exceeds BLOWUP_FACTOR times the median of the curves'
# first values (the initial loss): from there on it says nothing about the others and would
# only stretch the y axis. A run that stopped early on a non-finite loss (summary status
# "diverged") is marked at its last finite point.
BLOWUP_FACTOR = 10.0
UNFINISHED = ("unfinished", "interrupted", "failed")
LINE_STYLES = ["-", "--", ":", "-."]


class Curve:
    def __init__(self, group, x, metric, smooth):
        xs, mean, lo, hi = group_curve(group.members, x, metric)
        self.group, self.xs, self.mean, self.lo, self.hi = group, xs, mean, lo, hi
        self.smooth = smooth
        self.diverged = any(r.status == "diverged" for r in group.members)
        # A run that did not finish (interrupted, failed to write, killed or still running:
        # no summary.json) is drawn as far as it got and marked, never shown as finished.
        self.unfinished = any(r.status in UNFINISHED for r in group.members)
        self.cut = None  # index of the first blown-up point, if any

    def apply_blowup(self, limit):
        if limit is None:
            return
        for i, v in enumerate(self.mean):
            if v > limit or v < -limit:
                self.cut = i
                break
        if self.cut is not None:
            # Keep the first blown-up point: the line leaves the axes there (clipped).
            n = self.cut + 1
            self.xs, self.mean, self.lo, self.hi = (self.xs[:n], self.mean[:n], self.lo[:n],
                                                    self.hi[:n])

    @property
    def stopped(self):
        return self.cut is not None or self.diverged

    def drawn(self):
        return (self.xs, ema(self.mean, self.smooth), ema(self.lo, self.smooth),
                ema(self.hi, self.smooth))


def blowup_limit(curves):
    firsts = sorted(abs(c.mean[0]) for c in curves if c.mean)
    if not firsts:
        return None
    median = firsts[len(firsts) // 2]
    return BLOWUP_FACTOR * median if median > 0 else None


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def choose_styles(groups, paths, names, matplotlib):
    """(colour per group, line style per group, legend sections). Numeric values of the
    first factor get an ordered colormap, light to dark in the values' order; a second
    factor with at most four values gets line styles. Otherwise every curve gets its own
    colour and its full label."""
    values = {p: sorted({json.dumps(g.values[p]) for g in groups},
                        key=lambda t: sort_key([json.loads(t)])) for p in paths}
    styled = [p for p in paths if 1 < len(values[p]) <= len(LINE_STYLES)]
    # A value some curves lack (null: another optimizer's option) would read "bits=null":
    # then every curve gets its own colour and its label (person_label) instead.
    complete = all(json.loads(v) is not None for p in paths for v in values[p])
    if len(paths) in (1, 2) and complete:
        color_path = next((p for p in paths if all(is_number(json.loads(v))
                                                   for v in values[p])), paths[0])
        style_path = next((p for p in styled if p != color_path), None)
        if len(paths) == 1 or style_path is not None:
            colors = value_colors([json.loads(v) for v in values[color_path]], matplotlib)
            color_of = {v: colors[i] for i, v in enumerate(values[color_path])}
            style_of = ({v: LINE_STYLES[i] for i, v in enumerate(values[style_path])}
                        if style_path else {})
            g_color = [color_of[json.dumps(g.values[color_path])] for g in groups]
            g_style = [style_of.get(json.dumps(g.values.get(style_path)), "-")
                       if style_path else "-" for g in groups]
            sections = [(names[color_path], [(value_text(groups, color_path, v), color_of[v],
                                              "-") for v in values[color_path]])]
            if style_path:
                sections.append((names[style_path],
                                 [(value_text(groups, style_path, v), "0.3", style_of[v])
                                  for v in values[style_path]]))
            return g_color, g_style, sections
    colors = value_colors(list(range(len(groups))), matplotlib, categorical=True)
    return colors, ["-"] * len(groups), [(None, [(g.label, colors[i], "-")
                                                 for i, g in enumerate(groups)])]


def value_text(groups, path, value_json):
    """A legend entry: the value as the sweep file wrote it (as_written, from a run of a
    curve with that value), else as format_value writes it."""
    for g in groups:
        if json.dumps(g.values.get(path)) == value_json:
            return as_written(g.members[0], path, json.loads(value_json))
    return format_value(json.loads(value_json))


def value_colors(vals, matplotlib, categorical=False):
    """Numbers: evenly spaced by rank along a light-to-dark sequential colormap (viridis) (ranks, so
    that 0, 15, 30, ..., 600 are told apart as well as 1, 2, 3). Anything else: tab10,
    tab20, then a rainbow for more."""
    n = len(vals)
    if not categorical and all(is_number(v) for v in vals) and n > 1:
        cmap = matplotlib.colormaps["viridis"] if hasattr(matplotlib, "colormaps") else \
            matplotlib.cm.get_cmap("viridis")
        # viridis is perceptually uniform; from 0.88 (light green) down to 0 (dark purple):
        # its yellow end is too pale on white.
        return [cmap(0.88 * (1 - i / (n - 1))) for i in range(n)]
    if n <= 10:
        return ["C%d" % i for i in range(n)]
    name = "tab20" if n <= 20 else "turbo"
    cmap = matplotlib.colormaps[name] if hasattr(matplotlib, "colormaps") else \
        matplotlib.cm.get_cmap(name)
    return [cmap(i / max(1, n - 1)) if n > 20 else cmap(i) for i in range(n)]


# ---------------------------------------------------------------- drawing

PANEL_IN = (3.6, 3.1)  # inches per panel: three panels and a legend fit a 14 in screen width
FONT_PT = 10


def draw(groups, paths, names, metric, axes, title, logy, smooth, prefix, log_axes=()):
    matplotlib, plt = import_matplotlib()
    from matplotlib.ticker import EngFormatter, MaxNLocator, NullFormatter
    plt.rcParams.update({"font.size": FONT_PT, "axes.titlesize": FONT_PT,
                         "axes.labelsize": FONT_PT, "xtick.labelsize": FONT_PT - 1,
                         "ytick.labelsize": FONT_PT - 1, "legend.fontsize": FONT_PT - 1,
                         "figure.titlesize": FONT_PT + 1, "svg.fonttype": "none",
                         # Same runs => same SVG/PDF bytes: fixed clip-path ids, no date.
                         "svg.hashsalt": "bitlab", "pdf.fonttype": 42})
    fig, panels = plt.subplots(1, len(axes), figsize=(PANEL_IN[0] * len(axes), PANEL_IN[1]),
                               sharey=True, squeeze=False)
    panels = panels[0]
    g_color, g_style, sections = choose_styles(groups, paths, names, matplotlib)
    eval_like = not metric.startswith("train_loss") and metric != "grad_norm"
    any_stopped = any_unfinished = False
    for panel, x in zip(panels, axes):
        logx = x in log_axes
        curves = [Curve(g, x, metric, smooth) for g in groups]
        limit = blowup_limit(curves)
        for c in curves:
            c.apply_blowup(limit)
        kept_y, stopped_y = [], []  # stopped curves set the y limits only if all stopped
        for i, c in enumerate(curves):
            xs, mean, lo, hi = c.drawn()
            if logx:  # a log axis has no place for x <= 0 (step 0, nothing sent yet)
                keep = [k for k, v in enumerate(xs) if v > 0]
                xs, mean, lo, hi = ([a[k] for k in keep] for a in (xs, mean, lo, hi))
            if not xs:
                continue
            sparse = eval_like or len(xs) < 30
            panel.plot(xs, mean, color=g_color[i], linestyle=g_style[i], linewidth=1.2,
                       marker="o" if sparse else None, markersize=2.5)
            if len(c.group.members) > 1:
                panel.fill_between(xs, lo, hi, color=g_color[i], alpha=0.18, linewidth=0)
            if not c.stopped:
                kept_y.extend(lo + hi + mean)
            else:
                n = c.cut if c.cut is not None else len(mean)
                stopped_y.extend(lo[:n] + hi[:n] + mean[:n])
        set_ylim(panel, kept_y or stopped_y, logy)
        bottom, top = panel.get_ylim()
        for i, c in enumerate(curves):
            if c.unfinished and not c.stopped and c.xs:
                any_unfinished = True
                y = ema(c.mean, smooth)[-1]
                panel.plot([c.xs[-1]], [min(max(y, bottom), top)], marker="o", markersize=5,
                           markerfacecolor="white", markeredgecolor=g_color[i],
                           markeredgewidth=1.2, linestyle="none", clip_on=False, zorder=5)
            if c.stopped and c.xs:
                any_stopped = True
                y = ema(c.mean, smooth)[-1]
                panel.plot([c.xs[-1]], [min(max(y, bottom), top)], marker="X", markersize=6,
                           color=g_color[i], markeredgecolor="black", markeredgewidth=0.5,
                           linestyle="none", clip_on=False, zorder=5)
        panel.set_xlabel(X_LABELS.get(x, x))
        panel.grid(True, alpha=0.3)
        if logx:  # before the formatters below, which set_xscale would reset
            panel.set_xscale("log")
            panel.xaxis.set_minor_formatter(NullFormatter())
        if x.startswith("bytes"):
            panel.xaxis.set_major_formatter(EngFormatter(unit="B", sep=""))
        elif x.startswith("sim_time_s"):
            panel.xaxis.set_major_formatter(EngFormatter(unit="s", sep=""))
            panel.set_xlabel("simulated time" + x[len("sim_time_s"):] +
                             (" (communication only)" if comm_only(groups) else ""))
        if not logx:
            panel.xaxis.set_major_locator(MaxNLocator(nbins=4))  # room for "400ms" labels
    panels[0].set_ylabel(metric + (" (EMA)" if smooth > 1 else ""))

    handles, labels = legend_entries(sections, any_stopped, any_unfinished)
    seeds = sorted({len(g.members) for g in groups})
    notes = []
    if seeds != [1]:
        notes.append("line: mean over %s seeds, band: min–max"
                     % "/".join(str(n) for n in seeds))
    if smooth > 1:
        notes.append("EMA over %d points (α = 2/%d)" % (smooth, smooth + 1))
    fig.suptitle(title, fontweight="bold", y=1.0)
    if notes:
        fig.text(0.5, 0.915, "; ".join(notes), ha="center", va="top",
                 fontsize=FONT_PT - 1, color="0.3")
    if handles:
        fig.legend(handles=handles, labels=labels, loc="upper left",
                   bbox_to_anchor=(1.0, 0.9), frameon=False, handlelength=2.2,
                   borderaxespad=0.2, labelspacing=0.3)
    fig.tight_layout(rect=(0, 0, 1, 0.95 if notes else 1.0))  # suptitle counted by tight_layout
    out = []
    for ext in ("png", "svg", "pdf"):
        path = prefix + "." + ext
        metadata = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}.get(ext)
        write_atomic(path, lambda tmp: fig.savefig(tmp, format=ext, dpi=200,
                                                   bbox_inches="tight", metadata=metadata))
        out.append(path)
    plt.close(fig)
    return out


def legend_entries(sections, any_stopped, any_unfinished):
    """(handles, labels) of the legend: each section's header and entries, then the marks
    for curves that blew up or did not finish."""
    from matplotlib.lines import Line2D
    handles, labels = [], []
    for header, entries in sections:
        if header:
            handles.append(Line2D([], [], linestyle="none"))
            labels.append(r"$\bf{%s}$" % header.replace("_", r"\_"))
        for text, color, style in entries:
            handles.append(Line2D([], [], color=color, linestyle=style, linewidth=1.5))
            labels.append(text)
    if any_stopped:
        handles.append(Line2D([], [], marker="X", color="0.5", markeredgecolor="black",
                              markeredgewidth=0.5, linestyle="none"))
        labels.append("diverged / blew up\n(cut at > %g× median\ninitial value)" % BLOWUP_FACTOR)
    if any_unfinished:
        handles.append(Line2D([], [], marker="o", markerfacecolor="white", color="0.3",
                              markeredgewidth=1.2, linestyle="none"))
        labels.append("unfinished (interrupted,\nfailed or no summary.json)")
    return handles, labels


def set_ylim(panel, ys, logy):
    """y limits from the curves that did not blow up (5 % margins; log: a factor)."""
    if logy:
        panel.set_yscale("log")
    ys = [y for y in ys if math.isfinite(y) and (y > 0 or not logy)]
    if not ys:
        return
    lo, hi = min(ys), max(ys)
    if logy:
        panel.set_ylim(lo / 1.15, hi * 1.15)
    else:
        pad = 0.05 * (hi - lo) if hi > lo else 0.05 * abs(hi) or 1.0
        panel.set_ylim(lo - pad, hi + pad)


def sweep_names(dirs):
    names = []
    for d in dirs:
        try:
            with open(os.path.join(d, "sweep.json")) as f:
                n = json.load(f).get("name")
        except (OSError, ValueError, AttributeError):
            continue
        if n and n not in names:
            names.append(str(n))
    return names


def default_title(dirs, runs, metric):
    names = sweep_names(dirs)
    if not names:
        for r in runs:
            n = r.config.get("name")
            if n and n not in names:
                names.append(str(n))
    return (", ".join(names[:3]) + (", ..." if len(names) > 3 else "") + ": " if names
            else "") + metric


def comm_only(groups):
    """True when every run has a simulated time without compute in it (summary.json's
    time.compute_s is 0: no compute model)."""
    times = [(r.summary.get("time") or {}) for g in groups for r in g.members]
    return bool(times) and all(t.get("sim_time_s") is not None and t.get("compute_s") == 0
                               for t in times)


def changes_phase(run):
    """True when the run's metrics.csv names more than one phase (a warm-up, then a
    compressed phase): its bytes per step differ by orders of magnitude."""
    if "phase" not in run.columns:
        return False
    col = run.columns.index("phase")
    return len({row[col] for row in run.rows if col < len(row)}) > 1


def log_axes(axes, runs, logx, linx):
    """The x axes drawn logarithmic: all with --logx, none with --linx; by default the
    bytes axis when some run changes phase (a linear axis squashes the compressed
    phase's curve into the warm-up's first few bytes)."""
    if logx or linx:
        return set(axes) if logx else set()
    return {x for x in axes if x.startswith("bytes_sent") and any(map(changes_phase, runs))}


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="plot.py",
        description="Loss curves of bitlab runs against steps, simulated time and bytes sent "
                    "(PNG, SVG and PDF). Runs differing only by seed: mean line, min-max band.")
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
                        help="write PREFIX.png, PREFIX.svg and PREFIX.pdf (default: "
                             "FIRST_DIR/plot, or FIRST_DIR/plot-METRIC for a metric other than "
                             "train_loss)")
    parser.add_argument("--title", help="figure title (default: the sweep's name, else the "
                                        "runs' names, and the metric)")
    parser.add_argument("--logy", action="store_true", help="logarithmic y axis")
    xscale = parser.add_mutually_exclusive_group()
    xscale.add_argument("--logx", action="store_true",
                        help="logarithmic x axes (points at x <= 0 left out): a warm-up's "
                             "bytes no longer squash the compressed phase into a line")
    xscale.add_argument("--linx", action="store_true",
                        help="linear x axes throughout (by default the bytes axis is "
                             "logarithmic when a run changes phase)")
    parser.add_argument("--where", action="append", default=[], metavar="PATH=VALUE",
                        help="keep only runs whose config has PATH=VALUE (PATH may be its last "
                             "part: freeze_step=120); repeat to combine (a path given twice "
                             "accepts either value)")
    parser.add_argument("--smooth", type=int, default=0, metavar="N",
                        help="exponential moving average over N points (alpha = 2/(N+1)); "
                             "stated on the figure")
    args = parser.parse_args(argv)

    if args.smooth < 0:
        raise InputError("--smooth %d: must be >= 0 (0 or 1: no smoothing)" % args.smooth)
    paths, sweep_columns = find_runs(args.dirs)
    runs = [Run(p) for p in paths]
    runs = apply_where(runs, parse_where(args.where, runs))
    axes = check_columns(runs, args.metric, args.x)
    groups, varying, names = group_runs(runs, sweep_columns)
    if not any(group_curve(m, axes[0], args.metric)[0] for _, m in groups):
        raise InputError("metric %r has no values in these runs" % args.metric)
    prefix = args.out or os.path.join(
        args.dirs[0], "plot" if args.metric == "train_loss" else "plot-" + args.metric)
    check_out_folder("--out", prefix, prefix=True)

    title = args.title or default_title(args.dirs, runs, args.metric)
    out = draw(groups, varying, names, args.metric, axes, title, args.logy, args.smooth, prefix,
               log_axes=log_axes(axes, runs, args.logx, args.linx))
    print("plot: %d runs in %d curves" % (len(runs), len(groups)), file=sys.stderr)
    write_stdout("".join(p + "\n" for p in out))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
