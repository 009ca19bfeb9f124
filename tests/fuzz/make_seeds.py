#!/usr/bin/env python3
"""Writes the fuzzers' seed corpus from experiments/ into OUT/experiment,
OUT/sweep and OUT/cost (one file per seed, in the input format of
tests/fuzz/fuzz_input.hpp). Built, never committed: experiments/ is the source.

- cost: every file with "params" (a cost spec), alone and with --set overrides,
  and every experiment file (`bitlab cost` prices one as it stands);
- sweep: every file with "base", the base file inlined (so the seed does not
  depend on its folder);
- experiment: every other .json, alone and with --set overrides;
- checkpoint (with --bitlab BINARY): OUT/checkpoint-run/, a run of
  tests/fuzz/checkpoint_experiment.json stopped as if killed after its
  checkpoint at step 4, and OUT/checkpoint/, its checkpoint.bin in the input
  format of tests/fuzz/checkpoint_input.hpp (as it stands, and unsealed).

Usage: make_seeds.py OUT [--bitlab BINARY]
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

# --set overrides appended to some seeds: each kind of value --set takes.
EXPERIMENT_SETS = [
    ["optimizer.lr=0.02", "seed=3"],
    ["cluster.workers=4", "steps=5"],
    ["network.preset=ethernet_40g_v100x4", "description=\"a b\""],
    ["optimizer={\"name\": \"adam\"}", "problem.name=quadratic"],
]
COST_SETS = [
    ["optimizer.freeze_step=1500", "workers=16"],
    ["params=1e6", "network.preset=infiniband_qdr_v100x8"],
    ["optimizer.name=adam", "steps=10"],
]


def encode(text, sets=()):
    return "\0".join([text, *sets]).encode()


def inline_base(sweep, folder):
    base = sweep.get("base")
    if isinstance(base, str) and (folder / base).is_file():
        sweep = dict(sweep)
        sweep["base"] = json.loads((folder / base).read_text())
    return json.dumps(sweep, indent=1)


# The seal StateArchive::seal() ends a checkpoint with: a u16 name length,
# "checksum", a u8 type, a u64 count, then the u64 checksum.
SEAL_BYTES = 2 + len("checksum") + 1 + 8 + 8


def make_checkpoint_run(bitlab, folder):
    """A run of checkpoint_experiment.json in `folder` as a kill after its checkpoint at
    step 4 leaves it, less checkpoint.bin (whose bytes are returned) and summary.json."""
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run([bitlab, "run", str(ROOT / "tests/fuzz/checkpoint_experiment.json"),
                    "--out", str(folder), "--checkpoint-every", "4", "--threads", "1",
                    "--quiet"], check=True, stdout=subprocess.DEVNULL)
    (folder / "summary.json").unlink()
    checkpoint = (folder / "checkpoint.bin").read_bytes()
    (folder / "checkpoint.bin").unlink()
    return checkpoint


def checkpoint_seeds(checkpoint):
    """The inputs (tests/fuzz/checkpoint_input.hpp) of a checkpoint: as it stands, and
    unsealed for the harness to seal again."""
    return [b"\0" + checkpoint, b"\1" + checkpoint[:-SEAL_BYTES]]


def main(out, bitlab=None):
    out = pathlib.Path(out)
    for kind in ("experiment", "sweep", "cost"):
        (out / kind).mkdir(parents=True, exist_ok=True)
    counts = {"experiment": 0, "sweep": 0, "cost": 0}

    def put(kind, data):
        (out / kind / f"seed-{counts[kind]:03d}").write_bytes(data)
        counts[kind] += 1

    for path in sorted((ROOT / "experiments").rglob("*.json")):
        text = path.read_text()
        doc = json.loads(text)
        if "params" in doc:
            put("cost", encode(text))
            for sets in COST_SETS:
                put("cost", encode(text, sets))
        elif "base" in doc:
            put("sweep", encode(inline_base(doc, path.parent)))
        else:
            put("experiment", encode(text))
            put("experiment", encode(text, EXPERIMENT_SETS[counts["experiment"] % 4]))
            if "problem" in doc:
                put("cost", encode(text))
    if bitlab:
        (out / "checkpoint").mkdir(parents=True, exist_ok=True)
        counts["checkpoint"] = 0
        for data in checkpoint_seeds(make_checkpoint_run(bitlab, out / "checkpoint-run")):
            put("checkpoint", data)
    print("seeds:", ", ".join(f"{n} {k}" for k, n in counts.items()), "in", out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--bitlab", help="the bitlab binary that makes the checkpoint seeds")
    args = parser.parse_args()
    main(args.out, args.bitlab)
