#!/usr/bin/env python3
"""Keep experiments/claims/claims.csv true: re-run its rows and compare each with the figure
it records.

    python3 experiments/claims/check.py [--bitlab PATH] [--csv FILE]   # the cost rows (CI)
    python3 experiments/claims/check.py --train                        # the training rows
    python3 experiments/claims/check.py --self-test                    # a planted wrong figure

A row's command is a bash command run from the repository root, with `bitlab` standing for
the binary given by --bitlab (default: $BITLAB_BINARY, else build/bitlab). Its last line of
output is bitlab's figure; the recorded figure is the first number in the row's
`bitlab_figure`. They must agree within 1 % (TOLERANCE: the table records 3-4 significant
digits, whose rounding is at most 0.5 %; everything else in a cost row is deterministic
arithmetic, so any larger difference is a changed model or a wrong row).

Cost rows are the rows whose command runs `bitlab cost` and nothing that trains. Training
rows (`bitlab sweep` / `bitlab run`) are run only with --train: they take minutes (the
runtime is printed per row). A row that uses gradient accumulation
(`--gradient-accumulation-steps`, `compute.gradient_accumulation_steps`) is skipped, with
that reason, while the binary's `cost --help` does not know the flag.
Exit status: 0 every checked row agrees; 1 some row disagrees or its command failed; 2 a bad
table (missing column, row without a command or a number).
"""
import argparse
import csv
import io
import os
import re
import subprocess
import sys
import time

COLUMNS = ["paper", "claim", "paper_figure", "bitlab_figure", "verdict", "reason", "command"]
VERDICTS = {"reproduced", "partly", "refuted", "out of reach"}
TOLERANCE = 0.01
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_GAS = ("--gradient-accumulation-steps", "gradient_accumulation_steps")


class TableError(Exception):
    pass


def read_text(path):
    try:
        with open(path, newline="") as f:
            return f.read()
    except OSError as e:
        raise TableError(f"{path}: cannot read ({e.strerror})")


def read_table(path):
    """The rows of claims.csv, validated: exact columns, a known verdict, a command, a number."""
    reader = csv.DictReader(io.StringIO(read_text(path)))
    if reader.fieldnames != COLUMNS:
        raise TableError(f"{path}: columns {reader.fieldnames}; must be exactly {COLUMNS}")
    rows = list(reader)
    for i, row in enumerate(rows, start=1):
        where = f"{path} row {i} ({row['paper']}: {row['claim'][:40]})"
        if row["verdict"] not in VERDICTS:
            raise TableError(f"{where}: verdict = {row['verdict']!r}: must be one of "
                             f"{sorted(VERDICTS)}")
        if not row["command"].strip():
            raise TableError(f"{where}: command is empty; every row needs a runnable command")
        if not _NUMBER.search(row["bitlab_figure"]):
            raise TableError(f"{where}: bitlab_figure = {row['bitlab_figure']!r}: must start "
                             "with a number")
    return rows


def kind(row):
    command = row["command"]
    # A training row runs `bitlab sweep` / `bitlab run`, or a bridge script that trains a
    # PyTorch model through bitlab.torch (experiments/powersgd-vs-onebit/run.py).
    if re.search(r"\bbitlab (sweep|run)\b|/run\.py\b", command):
        return "train"
    if re.search(r"\bbitlab cost\b", command):
        return "cost"
    return "other"


def recorded(row):
    return float(_NUMBER.search(row["bitlab_figure"]).group())


def agrees(got, want):
    return abs(got - want) <= TOLERANCE * abs(want) + 1e-12


def run_command(command, bitlab):
    """(figure or None, seconds, error text) of one row's command."""
    script = f'bitlab() {{ "{bitlab}" "$@"; }}\nset -o pipefail\n{command}\n'
    start = time.monotonic()
    proc = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - start
    lines = [l for l in proc.stdout.splitlines() if l.strip()]
    if proc.returncode != 0 or not lines:
        return None, seconds, (proc.stderr.strip() or f"exit {proc.returncode}, no output")
    try:
        return float(lines[-1].split()[0]), seconds, ""
    except ValueError:
        return None, seconds, f"last line {lines[-1]!r} is not a number"


def pending_reason(row, bitlab, help_text):
    uses_gas = any(g in row["command"] for g in _GAS) or any(
        g in _spec_text(row["command"]) for g in _GAS)
    if uses_gas and "--gradient-accumulation-steps" not in help_text:
        return ("pending: this bitlab's `cost` has no --gradient-accumulation-steps yet; "
                "the row is checked once it has")
    return ""


def _spec_text(command):
    text = ""
    for path in re.findall(r"experiments/\S+\.json", command):
        try:
            with open(os.path.join(ROOT, path)) as f:
                text += f.read()
        except OSError:
            pass
    return text


def check(rows, bitlab, which):
    """Run the rows of kind `which`; print one line per row; return the number of failures."""
    help_text = subprocess.run([bitlab, "cost", "--help"], capture_output=True,
                               text=True).stdout
    failures = checked = skipped = 0
    for i, row in enumerate(rows, start=1):
        if kind(row) != which:
            continue
        label = f"row {i:2d} {row['paper']}: {row['claim'][:50]}"
        reason = pending_reason(row, bitlab, help_text)
        if reason:
            print(f"SKIP {label}\n       {reason}")
            skipped += 1
            continue
        got, seconds, error = run_command(row["command"], bitlab)
        want = recorded(row)
        checked += 1
        if got is None:
            failures += 1
            print(f"FAIL {label}\n       command failed: {error}")
        elif not agrees(got, want):
            failures += 1
            print(f"FAIL {label}\n       got {got:.4g}, recorded {want:.4g} "
                  f"(off by {100 * abs(got - want) / abs(want):.2f} %, tolerance "
                  f"{100 * TOLERANCE:g} %)")
        else:
            print(f"ok   {label}: {got:.4g} (recorded {want:.4g}; {seconds:.1f} s)")
    print(f"{which} rows: {checked} checked, {failures} failed, {skipped} skipped")
    return failures


def self_test(rows, bitlab):
    """Plant figures 2 % off (must fail) and 0.5 % off (must pass) into the first cost row
    that can run; 0 iff the check tells them apart."""
    help_text = subprocess.run([bitlab, "cost", "--help"], capture_output=True,
                               text=True).stdout
    target = next((r for r in rows if kind(r) == "cost"
                   and not pending_reason(r, bitlab, help_text)), None)
    if target is None:
        print("self-test: no runnable cost row")
        return 1
    ok = True
    for factor, should_fail in ((1.02, True), (0.98, True), (1.005, False)):
        planted = dict(target, bitlab_figure=f"{recorded(target) * factor:.6g}")
        print(f"self-test: recorded figure {recorded(target):.4g} planted as "
              f"{planted['bitlab_figure']} (x{factor}); the check must "
              f"{'fail' if should_fail else 'pass'}")
        failed = check([planted], bitlab, "cost") > 0
        ok = ok and failed == should_fail
    print("self-test: " + ("the check catches the planted figures" if ok else
                           "THE CHECK DID NOT BEHAVE"))
    return 0 if ok else 1


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    parser.add_argument("--csv", default=os.path.join(HERE, "claims.csv"))
    parser.add_argument("--bitlab", default=os.environ.get("BITLAB_BINARY",
                                                          os.path.join(ROOT, "build", "bitlab")))
    parser.add_argument("--train", action="store_true", help="run the training rows instead")
    parser.add_argument("--self-test", action="store_true",
                        help="show that a figure planted 2 %% off fails the check")
    args = parser.parse_args(argv)
    bitlab = os.path.abspath(args.bitlab)
    if not os.access(bitlab, os.X_OK):
        print(f"check.py: error: --bitlab = {args.bitlab}: not an executable file",
              file=sys.stderr)
        return 2
    try:
        rows = read_table(args.csv)
    except TableError as e:
        print(f"check.py: error: {e}", file=sys.stderr)
        return 2
    if args.self_test:
        return self_test(rows, bitlab)
    return 1 if check(rows, bitlab, "train" if args.train else "cost") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
