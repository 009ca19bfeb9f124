#!/usr/bin/env python3
"""Writes the fuzzers' seed corpus from experiments/ into OUT/experiment,
OUT/sweep and OUT/cost (one file per seed, in the input format of
tests/fuzz/fuzz_input.hpp). Built, never committed: experiments/ is the source.

- cost: every file with "params" (a cost spec), alone and with --set overrides;
- sweep: every file with "base", the base file inlined (so the seed does not
  depend on its folder);
- experiment: every other .json, alone and with --set overrides.

Usage: make_seeds.py OUT
"""
import json
import pathlib
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


def main(out):
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
    print("seeds:", ", ".join(f"{n} {k}" for k, n in counts.items()), "in", out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
