#!/usr/bin/env python3
"""The convergence gap of one optimizer against its uncompressed twin over seeds, with a
confidence interval, and the verdict it gives against a stated margin.

    python3 experiments/claims/gap.py SWEEP_DIR --arm onebit_adam --baseline adam \
        [--metric eval_loss] [--margin 5]

Reads SWEEP_DIR/sweep.csv (written by `bitlab sweep`), pairs the arm's runs with the
baseline's by seed (a seed draws the same initial weights, shards and batches for both), and
for each seed takes the relative gap 100 * (arm - baseline) / baseline of the final `metric`
(a loss: lower is better). It prints the per-seed gaps, their mean and a two-sided 95 %
Student-t interval over seeds, and the verdict:
  reproduced  the whole interval lies below +margin %  (no worse than the baseline by more
              than the margin, at 95 % confidence)
  refuted     the whole interval lies above +margin %
  partly      the interval straddles +margin % (the seeds cannot decide)
The last line is the mean gap in % (4 significant digits), the figure claims.csv records.
Exit status 2 on a missing sweep.csv, arm, metric or seed pairing, naming it; fewer than 5
paired seeds is an error too (the claims table's rule).
"""
import argparse
import csv
import math
import os
import sys

# Two-sided 95 % Student-t quantiles t_{0.975, df}, df = 1..30 (standard tables).
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
MIN_SEEDS = 5


class GapError(Exception):
    pass


def _final_by_seed(rows, name, metric):
    """{seed: final metric} of the completed runs of optimizer `name`."""
    out = {}
    for row in rows:
        if row.get("optimizer") != name:
            continue
        if row.get("status") != "completed":
            raise GapError(f"run {row.get('run')} ({name}, seed {row.get('seed')}): status "
                           f"{row.get('status')!r}, not completed")
        seed = row["seed"]
        if seed in out:
            raise GapError(f"optimizer {name}: seed {seed} appears twice; the sweep must hold "
                           "one run per optimizer and seed")
        try:
            out[seed] = float(row[metric])
        except (KeyError, ValueError):
            raise GapError(f"run {row.get('run')}: metric '{metric}' missing or not a number")
    if not out:
        raise GapError(f"no run of optimizer '{name}' in sweep.csv")
    return out


def gap_interval(arm, base):
    """Per-seed relative gaps (%) and mean, lower, upper of the 95 % t-interval."""
    seeds = sorted(set(arm) & set(base), key=int)
    if len(seeds) < MIN_SEEDS:
        raise GapError(f"{len(seeds)} paired seeds; at least {MIN_SEEDS} are needed")
    if len(seeds) - 1 > len(_T975):
        raise GapError(f"{len(seeds)} seeds: the t table stops at {len(_T975) + 1}")
    gaps = [100.0 * (arm[s] - base[s]) / base[s] for s in seeds]
    mean = sum(gaps) / len(gaps)
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1))
    half = _T975[len(gaps) - 2] * sd / math.sqrt(len(gaps))
    return seeds, gaps, mean, mean - half, mean + half


def verdict(lower, upper, margin):
    if upper < margin:
        return "reproduced"
    if lower > margin:
        return "refuted"
    return "partly"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    parser.add_argument("sweep_dir")
    parser.add_argument("--arm", required=True)
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--metric", default="eval_loss")
    parser.add_argument("--margin", type=float, default=5.0,
                        help="non-inferiority margin in %% of the baseline's metric (default 5)")
    args = parser.parse_args(argv)
    path = os.path.join(args.sweep_dir, "sweep.csv")
    try:
        try:
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
        except OSError as e:
            raise GapError(f"{path}: cannot read ({e.strerror})")
        if args.margin <= 0:
            raise GapError(f"--margin = {args.margin}: must be > 0")
        arm = _final_by_seed(rows, args.arm, args.metric)
        base = _final_by_seed(rows, args.baseline, args.metric)
        seeds, gaps, mean, lower, upper = gap_interval(arm, base)
    except GapError as e:
        print(f"gap.py: error: {e}", file=sys.stderr)
        return 2
    print(f"{args.arm} vs {args.baseline}, final {args.metric}, {len(seeds)} seeds")
    for s, g in zip(seeds, gaps):
        print(f"  seed {s}: {arm[s]:.5g} vs {base[s]:.5g}  gap {g:+.2f} %")
    print(f"mean gap {mean:+.2f} %, 95 % CI [{lower:+.2f}, {upper:+.2f}] %; margin +{args.margin:g} %:"
          f" {verdict(lower, upper, args.margin)} (the verdict is 'reproduced' for any margin"
          f" above {upper:+.2f} %)")
    print(f"{mean:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
