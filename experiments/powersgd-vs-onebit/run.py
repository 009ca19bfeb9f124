"""PowerSGD (DDP's hook) beside Adam, 1-bit Adam, 0/1 Adam and LoCo, on equal terms.

    /usr/bin/python3 experiments/powersgd-vs-onebit/run.py OUT [--models cnn gpt mlp]
        [--seeds 1 2 3 4 5] [--smoke]

Trains every optimizer of OPTIMIZERS on each model with each seed (8 workers, the same
initial weights and batches for every optimizer of a seed), priced on the Ethernet preset as
it runs and re-priced on InfiniBand afterwards (`bitlab recost`). Run folders:
OUT/<model>/<optimizer>-seed<k>/. summarize.py turns them into the README's table and
figure. --smoke: a fifth of the steps and one seed (CI's check that the script runs).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import bitlab  # noqa: E402
import bitlab.torch  # noqa: E402
from models import SmallResNet, TinyGPT, fashion_task, fortunes_task  # noqa: E402

WORKERS = 8
ETHERNET, INFINIBAND = "ethernet_40g_v100x4", "infiniband_qdr_v100x8"
# steps, batch per worker, lr for each model (the notebook's CNN and GPT; the MLP of
# experiments/real-mlp-fashion at 8 workers).
SETTINGS = {"cnn": (140, 16, 2e-3), "gpt": (120, 8, 2e-3), "mlp": (300, 32, 2e-3)}
BETA2 = 0.99  # experiments/your-model/README.md, "Why β2 = 0.99"


def optimizers(steps, lr):
    """Every optimizer compared, as bitlab optimizer sections. PowerSGD starts where the 1-bit
    family's warm-up ends (15 % of the steps), so all compressors compress the same steps."""
    warm = max(2, round(0.15 * steps))
    adam = {"name": "adam", "lr": lr, "beta2": BETA2, "bias_correction": False}
    out = {"adam": adam}
    for r in (1, 2, 4):
        out[f"powersgd_r{r}"] = {**adam, "gradient_exchange": {
            "name": "powersgd", "matrix_approximation_rank": r, "start_powerSGD_iter": warm}}
    out["onebit_adam"] = {"name": "onebit_adam", "lr": lr, "beta2": BETA2, "freeze_step": warm}
    out["zero_one_adam"] = {"name": "zero_one_adam", "lr": lr, "beta2": BETA2,
                            "var_freeze_step": warm, "local_step_scaler": max(1, steps // 8),
                            "local_step_clipper": 4}
    out["loco"] = {"name": "loco", "lr": lr, "beta2": BETA2, "bias_correction": False}
    return out


def train_bridge(model_name, optimizer, key, seed, steps, batch, out):
    """One run through bitlab.torch: worker w at step t draws its batch from (seed, w, t)."""
    if model_name == "cnn":
        shards, loss_fn, evaluate = fashion_task(WORKERS, seed)
        make = SmallResNet
    else:
        shards, loss_fn, evaluate, vocab = fortunes_task(WORKERS, seed)
        make = lambda: TinyGPT(vocab)  # noqa: E731
    torch.manual_seed(seed)
    model = make()
    sim = bitlab.torch.Simulation(model, workers=WORKERS, seed=seed, steps=steps,
                                  optimizer=optimizer, network={"preset": ETHERNET},
                                  out=out, eval_every=max(5, steps // 5), evaluate=evaluate,
                                  threads=1, quiet=True)
    with sim:
        for step in range(steps):
            for w in sim.local_workers:
                inputs, targets = shards[w]
                rng = np.random.default_rng([seed, w, step])
                i = torch.from_numpy(rng.integers(len(inputs), size=batch))
                with sim.worker(w) as wk:
                    loss = loss_fn(model(inputs[i]), targets[i])
                    loss.backward()
                    wk.loss = loss.item()
            if not sim.step():
                break
    return sim.status


def train_mlp(optimizer, seed, steps, batch, out):
    """The 784-128-10 MLP of experiments/real-mlp-fashion through `bitlab run` (no torch)."""
    base = json.loads((ROOT / "experiments/real-mlp-fashion/base.json").read_text())
    base.update(seed=seed, steps=steps, eval_every=max(5, steps // 6), optimizer=optimizer,
                network={"preset": ETHERNET})
    base["cluster"].update(workers=WORKERS, batch_size=batch)
    return bitlab.run(base, out=str(out), threads=1).status


def recost(run_dir):
    binary = Path(bitlab.__file__).parent / ".." / ".." / "bitlab"
    binary = os.environ.get("BITLAB_BINARY") or str(binary.resolve())
    subprocess.run([binary, "recost", str(run_dir), "--network", INFINIBAND, "--force"],
                   check=True, capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--models", nargs="+", default=["cnn", "gpt", "mlp"],
                    choices=["cnn", "gpt", "mlp"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    ap.add_argument("--only", nargs="+", help="optimizer keys to run (default: all)")
    ap.add_argument("--smoke", action="store_true", help="a fifth of the steps, seed 1")
    args = ap.parse_args()
    torch.set_num_threads(1)
    seeds = [1] if args.smoke else args.seeds
    for model in args.models:
        steps, batch, lr = SETTINGS[model]
        steps = steps // 5 if args.smoke else steps
        for key, opt in optimizers(steps, lr).items():
            if args.only and key not in args.only:
                continue
            for seed in seeds:
                out = args.out / model / f"{key}-seed{seed}"
                if (out / "summary.json").exists():
                    continue  # done in an earlier invocation
                start = time.time()
                status = (train_mlp(opt, seed, steps, batch, out) if model == "mlp" else
                          train_bridge(model, opt, key, seed, steps, batch, out))
                recost(out)
                print(f"{model} {key:14s} seed {seed}: {status} in {time.time() - start:5.1f} s",
                      flush=True)


if __name__ == "__main__":
    main()
