"""The table and figure of experiments/powersgd-vs-onebit/README.md from run.py's folders.

    /usr/bin/python3 experiments/powersgd-vs-onebit/summarize.py OUT [--figure figure.png]

Per model and optimizer, over the seeds: the last held-out loss (mean and 95 % t-interval),
its gap to Adam of the same seed (paired: mean and 95 % interval), bytes sent per worker, and
the simulated communication time on the Ethernet and InfiniBand presets. Prints a Markdown
table; the figure shows held-out loss against bytes and against simulated time (both presets).
"""

import argparse
import json
import math
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from run import INFINIBAND  # noqa: E402

LABELS = {"adam": "Adam", "powersgd_r1": "Adam + PowerSGD r=1", "powersgd_r2": "Adam + PowerSGD r=2",
          "powersgd_r4": "Adam + PowerSGD r=4", "onebit_adam": "1-bit Adam",
          "zero_one_adam": "0/1 Adam", "loco": "LoCo (4-bit)"}
COLORS = {"adam": "k", "powersgd_r1": "C3", "powersgd_r2": "C4", "powersgd_r4": "C5",
          "onebit_adam": "C0", "zero_one_adam": "C1", "loco": "C2"}
TITLES = {"cnn": "SmallResNet, Fashion-MNIST", "gpt": "TinyGPT, fortunes",
          "mlp": "MLP 784-128-10, Fashion-MNIST", "gpt1m": "TinyGPT 1.05 M, fortunes"}
# Two-sided 95 % Student t quantiles by degrees of freedom.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def interval(values):
    """(mean, half-width of the 95 % t-interval); half-width NaN with one value."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, T95.get(n - 1, 1.96) * sd / math.sqrt(n)


def load(out):
    runs = {}
    for summary in sorted(Path(out).glob("*/*-seed*/summary.json")):
        folder = summary.parent
        model = folder.parent.name
        key, seed = folder.name.rsplit("-seed", 1)
        metrics = pd.read_csv(folder / "metrics.csv")
        status = json.loads(summary.read_text())["status"]
        runs[model, key, int(seed)] = (metrics, status)
    return runs


def last_eval(metrics):
    return float(metrics["eval_loss"].dropna().iloc[-1])


def table(runs):
    rows = []
    for model in TITLES:
        seeds_of = {}
        for (m, key, seed) in runs:
            if m == model:
                seeds_of.setdefault(key, []).append(seed)
        for key in LABELS:
            seeds = sorted(seeds_of.get(key, []))
            if not seeds:
                continue
            ms = [runs[model, key, s][0] for s in seeds]
            losses = [last_eval(m) for m in ms]
            gaps = [last_eval(runs[model, key, s][0]) - last_eval(runs[model, "adam", s][0])
                    for s in seeds if (model, "adam", s) in runs]
            loss, loss_hw = interval(losses)
            gap, gap_hw = interval(gaps) if gaps else (float("nan"), float("nan"))
            last = [m.iloc[-1] for m in ms]
            rows.append({
                "model": model, "optimizer": LABELS[key], "seeds": len(seeds),
                "eval_loss": f"{loss:.4f} ± {loss_hw:.4f}",
                "gap to Adam": f"{gap:+.4f} ± {gap_hw:.4f}",
                "MB/worker": sum(r["bytes_sent_cum"] for r in last) / len(last) / 1e6,
                "comm s, Ethernet": sum(r["sim_time_s"] for r in last) / len(last),
                "comm s, InfiniBand": sum(r[f"sim_time_s@{INFINIBAND}"] for r in last) / len(last),
                "statuses": ",".join(sorted({runs[model, key, s][1] for s in seeds})),
            })
    return pd.DataFrame(rows)


def markdown(t):
    """A Markdown table (pandas' to_markdown needs tabulate, which Debian's pandas lacks)."""
    def cell(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(t.columns) + " |", "|" + "---|" * len(t.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in t.itertuples(index=False)]
    return "\n".join(lines)


def figure(runs, path):
    models = [m for m in TITLES if any(k[0] == m for k in runs)]
    fig, axes = plt.subplots(len(models), 3, figsize=(17, 4.6 * len(models)), squeeze=False)
    for row, model in zip(axes, models):
        for key in LABELS:
            ms = [runs[k][0] for k in sorted(runs) if k[0] == model and k[1] == key]
            if not ms:
                continue
            # Mean over seeds of the held-out loss at each evaluation (same steps per seed).
            evals = [m[m["eval_loss"].notna()] for m in ms]
            n = min(len(e) for e in evals)  # a diverged run stops early
            evals = [e.iloc[:n] for e in evals]
            loss = sum(e["eval_loss"].to_numpy() for e in evals) / len(evals)
            style = dict(color=COLORS[key], label=LABELS[key], marker="o", ms=3, lw=1.4)
            row[0].plot(evals[0]["bytes_sent_cum"] / 1e6, loss, **style)
            row[1].plot(evals[0]["sim_time_s"], loss, **style)
            row[2].plot(evals[0][f"sim_time_s@{INFINIBAND}"], loss, **style)
        row[0].set(title=f"{TITLES[model]}: held-out loss vs bytes", xscale="log",
                   xlabel="MB sent per worker (cumulative, log)", ylabel="eval_loss (mean of seeds)")
        row[1].set(title="vs simulated communication, Ethernet 4.1 Gbit/s", xscale="log",
                   xlabel="simulated communication s (log)")
        row[2].set(title="vs simulated communication, InfiniBand QDR", xscale="log",
                   xlabel="simulated communication s (log)")
        for ax in row:
            ax.grid(alpha=0.3, which="both")
        row[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--figure", type=Path, default=Path(__file__).parent / "figure.png")
    args = ap.parse_args()
    runs = load(args.out)
    if not runs:
        raise SystemExit(f"no runs under {args.out} (run run.py first)")
    t = table(runs)
    print(markdown(t))
    figure(runs, args.figure)
    print("figure:", args.figure)


if __name__ == "__main__":
    main()
