"""The README's BERT-Large cost rows: every optimizer of the comparison priced by `bitlab cost`
on bert-large.json (64 GPUs, 10 000 steps, compute 58.82 ms a step, compression after 15 %)
on the Ethernet and the InfiniBand preset.

    python3 experiments/powersgd-vs-onebit/cost_table.py [--bitlab build/bitlab]

Prints a Markdown table: the whole run's time, its speed-up against Adam with an fp16
allreduce (the papers' baseline) and the bytes each worker sends.
"""

import argparse
import json
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPEC = HERE / "bert-large.json"
NETWORKS = {"Ethernet 4.1 Gbit/s": "ethernet_40g_v100x4", "InfiniBand QDR": "infiniband_qdr_v100x8"}
PSGD = '{"name": "powersgd", "matrix_approximation_rank": %d, "start_powerSGD_iter": 1500}'
ROWS = {
    "Adam + PowerSGD r=1": ["--set", "optimizer.gradient_exchange=" + PSGD % 1],
    "Adam + PowerSGD r=4": ["--set", "optimizer.gradient_exchange=" + PSGD % 4],
    "Adam + PowerSGD r=32": ["--set", "optimizer.gradient_exchange=" + PSGD % 32],
    "1-bit Adam": ["--optimizer", "onebit_adam", "--set", "optimizer.freeze_step=1500",
                   "--set", "optimizer.wire=fp16"],
    "0/1 Adam": ["--optimizer", "zero_one_adam", "--set", "optimizer.var_freeze_step=1500",
                 "--set", "optimizer.wire=fp16"],
    "LoCo (4-bit)": ["--optimizer", "loco"],
}


def cost(bitlab, network, extra):
    out = subprocess.run([bitlab, "cost", str(SPEC), "--json", "--set",
                          f"network.preset={network}", *extra],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bitlab", default=str(HERE.parent.parent / "build" / "bitlab"))
    args = ap.parse_args()
    print("| network | optimizer | run h | speed-up vs Adam fp16 | TB sent per worker |")
    print("|---|---|---|---|---|")
    for label, network in NETWORKS.items():
        for name, extra in ROWS.items():
            j = cost(args.bitlab, network, extra)
            o = j["optimizer"]
            print(f"| {label} | {name} | {o['total_s'] / 3600:.2f} | "
                  f"{j['speedup']['vs_adam_fp16']:.2f}x | "
                  f"{o['total_sent_bytes_per_worker'] / 1e12:.2f} |")
        b = j["baselines"]["adam_fp16"]
        print(f"| {label} | Adam, fp16 allreduce | {b['total_s'] / 3600:.2f} | 1.00x | "
              f"{b['total_sent_bytes_per_worker'] / 1e12:.2f} |")


if __name__ == "__main__":
    main()
