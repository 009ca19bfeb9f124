#!/usr/bin/python3
"""A table of the runs under a results tree (behind `bitlab runs`).

Usage: runs.py [--csv | --json] [DIR]   (DIR default: results)

A DIR is a results tree (run folders up to three levels down), a sweep folder or one run
folder. One row per run: its folder (relative to DIR), optimizer, key options (the
optimizer's options as given in the config), workers, problem, status, steps completed /
planned, final train_loss and eval metrics, bytes sent per worker, simulated time, wall
time and how many warnings the run raised (summary.json's "warnings"; their text follows the
table; --csv joins them with " | ", --json lists them). The table's options are lr and
those that differ between runs of one optimizer; it prints bytes and times for people
(kB/MB/GB in steps of 10^3, ms/s/min/h); --csv and --json print raw numbers (bytes,
seconds) for scripts.

Exit status (bitlab_files.py): 0 done; 2 bad input (no such folder, no runs, a run's file
that is not UTF-8 text, valid csv or JSON, a summary.json field of the wrong type), with one
line `bitlab: error: <file>: <what>`; 4 standard output full or closed. Standard library only.
"""

import argparse
import csv
import io
import json
import math
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bitlab_files import InputError, run_main, short_json, write_stdout  # noqa: E402
from plot import Run, find_runs  # noqa: E402


def human_bytes(b):
    """Decimal units, three significant digits (as sim/core/human.hpp)."""
    if b is None or not math.isfinite(b):
        return ""
    units = ["B", "kB", "MB", "GB", "TB", "PB", "EB"]
    k = 0
    while k < 6 and abs(b) >= 999.5:
        b /= 1e3
        k += 1
    if k == 0:
        return "%.0f B" % b
    return ("%.0f %s" if abs(b) >= 100 else "%.3g %s") % (b, units[k])


def human_duration(s):
    if s is None or not math.isfinite(s):
        return ""
    if s >= 86400:
        return "%.2f days" % (s / 86400)
    if s >= 3600:
        return "%.2f h" % (s / 3600)
    if s >= 60:
        return "%.2f min" % (s / 60)
    if s >= 0.9995 or s == 0:
        return "%.3g s" % s
    if s >= 0.9995e-3:
        return "%.3g ms" % (s * 1e3)
    return "%.3g us" % (s * 1e6)


FINAL_SKIPPED = ("grad_norm", "eval_step")


def run_record(run, root):
    """One run as a dict of raw values (None where the run has no such value)."""
    s, c = run.summary, run.config
    rel = os.path.relpath(run.path, root)
    options = {k.split(".", 1)[1]: v for k, v in c.items()
               if k.startswith("optimizer.") and k != "optimizer.name"}
    final = {k: v for k, v in (s.get("final") or {}).items() if k not in FINAL_SKIPPED}
    if not final:  # an unfinished run: its last metrics.csv row
        final = last_metrics(run)
    return {
        "run": rel if rel != "." else os.path.basename(os.path.abspath(run.path)),
        "experiment": c.get("name"),
        "optimizer": c.get("optimizer.name"),
        "options": options,
        "workers": c.get("cluster.workers"),
        "problem": c.get("problem.name"),
        "seed": c.get("seed"),
        "status": run.status,
        "steps": s.get("steps_completed", len(run.rows)),
        "steps_planned": s.get("steps_planned", c.get("steps")),
        "final": final,
        "bytes_sent_per_worker": (s.get("totals") or {}).get("bytes_sent_per_worker"),
        "sim_time_s": (s.get("time") or {}).get("sim_time_s"),
        # no compute model: the simulated time is the communication's alone
        "communication_only": comm_only(s),
        "wall_s": s.get("wall_s"),
        "warnings": run_warnings(run),
        # "baseline": "twin" runs: the gaps to the uncompressed twin (summary.json)
        "twin": s.get("baseline"),
        "path": run.path,
    }


def comm_only(summary):
    """True when the run's simulated time has no compute in it (summary.json's time.compute_s
    is 0), None without a time model."""
    time = summary.get("time") or {}
    if time.get("sim_time_s") is None:
        return None
    compute = time.get("compute_s")
    return isinstance(compute, (int, float)) and compute == 0


def sim_time_text(record):
    """The simulated time for people, "(comm only)" beside it when no compute is modelled."""
    text = human_duration(record["sim_time_s"])
    return text + " (comm only)" if text and record.get("communication_only") else text


def run_warnings(run):
    """The run's warnings (summary.json's "warnings": a list of strings), [] when none."""
    warnings = run.summary.get("warnings") or []
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise InputError("%s: warnings = %s: must be a list of strings"
                         % (os.path.join(run.path, "summary.json"), short_json(warnings)))
    return warnings


def last_metrics(run):
    out = {}
    for row in run.rows[::-1]:
        for col, text in zip(run.columns, row):
            if col in ("train_loss",) or col.startswith("eval_") or col == "train_loss_full":
                try:
                    out.setdefault(col, float(text))
                except ValueError:
                    pass
    return out


def collect(dirs):
    paths, _ = find_runs(dirs)
    root = dirs[0] if os.path.isdir(dirs[0]) else "."
    return [run_record(Run(p), root) for p in paths]


def metric_columns(records):
    cols = []
    for r in records:
        for k in r["final"]:
            if k not in cols:
                cols.append(k)
    return cols


def options_text(options):
    return " ".join("%s=%s" % (k, json.dumps(v) if isinstance(v, (dict, list)) else
                               ("%g" % v if isinstance(v, float) else v))
                    for k, v in options.items())


def number_text(v):
    return "" if v is None else "%.4g" % v


def key_options(records):
    """Per run, the options worth a column: lr, and those that differ between the runs of
    the same optimizer (the full set is in --csv/--json and config.json)."""
    varying = {}
    for r in records:
        for k, v in r["options"].items():
            varying.setdefault((r["optimizer"], k), set()).add(json.dumps(v))
    return [{k: v for k, v in r["options"].items()
             if k == "lr" or len(varying[(r["optimizer"], k)]) > 1} for r in records]


def print_table(records):
    metrics = metric_columns(records)
    keys = key_options(records)
    header = (["run", "optimizer", "options", "workers", "problem", "status", "steps"] +
              metrics + ["bytes/worker", "sim time", "wall", "warnings"])
    rows = []
    for r, key in zip(records, keys):
        steps = "%s/%s" % (r["steps"], r["steps_planned"]) if r["steps_planned"] else str(
            r["steps"])
        rows.append([r["run"], str(r["optimizer"] or ""), options_text(key),
                     str(r["workers"] or ""), str(r["problem"] or ""), r["status"], steps] +
                    [number_text(r["final"].get(m)) for m in metrics] +
                    [human_bytes(r["bytes_sent_per_worker"]), sim_time_text(r),
                     human_duration(r["wall_s"]),
                     "%d (below)" % len(r["warnings"]) if r["warnings"] else ""])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    numeric = set(range(7, len(header) - 1)) | {3}
    write_stdout("".join("  ".join(cell.rjust(w) if i in numeric else cell.ljust(w)
                                   for i, (cell, w) in enumerate(zip(line, widths))).rstrip()
                         + "\n" for line in [header] + rows) + warnings_text(records))
    print("%d runs" % len(records), file=sys.stderr)


def warnings_text(records):
    """Each warned run's warnings under the table, one per line."""
    lines = ["\nwarnings:\n"] if any(r["warnings"] for r in records) else []
    for r in records:
        lines += ["  %s: %s\n" % (r["run"], w) for w in r["warnings"]]
    return "".join(lines)


def write_csv(records):
    metrics = metric_columns(records)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["run", "experiment", "optimizer", "options", "workers", "problem", "seed",
                "status", "steps_completed", "steps_planned"] + metrics +
               ["bytes_sent_per_worker", "sim_time_s", "wall_s", "path", "warnings"])
    for r in records:
        w.writerow([r["run"], r["experiment"], r["optimizer"], json.dumps(r["options"]),
                    r["workers"], r["problem"], r["seed"], r["status"], r["steps"],
                    r["steps_planned"]] + [raw(r["final"].get(m)) for m in metrics] +
                   [raw(r["bytes_sent_per_worker"]), raw(r["sim_time_s"]), raw(r["wall_s"]),
                    r["path"], " | ".join(r["warnings"])])
    write_stdout(out.getvalue())


def raw(v):
    return "" if v is None else repr(v) if isinstance(v, float) else v


def main(argv=None):
    parser = argparse.ArgumentParser(prog="runs.py", description=__doc__.split("\n")[0])
    parser.add_argument("dir", nargs="?", default="results", metavar="DIR")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="raw numbers as csv")
    fmt.add_argument("--json", action="store_true", help="raw numbers as a JSON array")
    args = parser.parse_args(argv)
    records = collect([args.dir])
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `bitlab runs | head` ends quietly
    if args.json:
        write_stdout(json.dumps(records, indent=1) + "\n")
    elif args.csv:
        write_csv(records)
    else:
        print_table(records)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
