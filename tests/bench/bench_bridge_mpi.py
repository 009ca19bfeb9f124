#!/usr/bin/env python3
"""The PyTorch bridge over MPI: how much faster R ranks train than one process.

A compute-bound job (an MLP 784-1024-1024-10, 1.86 M parameters, 8 workers x
batch 256: torch's forward and backward dominate the step), run as one process
and under `mpirun -np R` (each rank computes workers / R of the workers, one
torch thread each), --steps steps after --warmup. Prints the median wall time
of a step (the slowest rank's: every rank waits for the others in the
exchange) and the speed-up over one process; the target for R = 2 is at least
1.7x. The files of the runs are compared too (#wrong: lines of metrics.csv and
comm_log.csv, wall_s aside, that differ from the one-process run's).

  PYTHONPATH=build/python /usr/bin/python3 tests/bench/bench_bridge_mpi.py [--ranks 2]
"""

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def job(out, steps, warmup, widths, batch):
    """One rank's (or the one process's) training; rank 0 prints the step times as JSON."""
    import torch
    import bitlab.torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    sizes = [784] + widths + [10]
    layers = []
    for i in range(len(sizes) - 1):
        layers += [torch.nn.Linear(sizes[i], sizes[i + 1]), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    workers = 8
    sim = bitlab.torch.Simulation(model, workers=workers, steps=warmup + steps, seed=1,
                                  optimizer={"name": "adam", "lr": 1e-4}, out=out, threads=1)

    def batch_of(w, step):
        g = torch.Generator().manual_seed(1000 * step + w)
        return torch.randn(batch, 784, generator=g), torch.randint(0, 10, (batch,), generator=g)

    times = []
    for step in range(1, warmup + steps + 1):
        t0 = time.perf_counter()
        for w in sim.local_workers:
            x, y = batch_of(w, step)
            with sim.worker(w) as wk:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                wk.loss = loss.item()
        sim.step()
        if step > warmup:
            times.append(time.perf_counter() - t0)
    sim.close()
    if sim.rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(json.dumps({"params": params, "times": times, "ranks": sim.ranks}))


def rows(path):
    lines = pathlib.Path(path).read_text().splitlines()
    header = lines[0].split(",")
    k = header.index("wall_s") if "wall_s" in header else -1
    return [",".join(c for i, c in enumerate(l.split(",")) if i != k) for l in lines]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--widths", default="1024,1024")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--job", help=argparse.SUPPRESS)  # the ranks' entry point: OUT
    a = ap.parse_args()
    widths = [int(w) for w in a.widths.split(",")]
    if a.job:
        return job(a.job, a.steps, a.warmup, widths, a.batch)
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("bench_bridge_mpi: no mpirun (apt-get install openmpi-bin)")
        return 2
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in (1, a.ranks):
            cmd = [sys.executable, __file__, "--job", f"{tmp}/np{ranks}", "--steps", str(a.steps),
                   "--warmup", str(a.warmup), "--widths", a.widths, "--batch", str(a.batch)]
            if ranks > 1:
                cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                       "-np", str(ranks), *cmd]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if done.returncode != 0:
                print(done.stdout + done.stderr)
                return 1
            results[ranks] = json.loads(done.stdout.strip().splitlines()[-1])
        wrong = 0
        for name in ("metrics.csv", "comm_log.csv"):
            x, y = rows(f"{tmp}/np1/{name}"), rows(f"{tmp}/np{a.ranks}/{name}")
            wrong += abs(len(x) - len(y)) + sum(p != q for p, q in zip(x, y))
    one = statistics.median(results[1]["times"])
    many = statistics.median(results[a.ranks]["times"])
    print(f"bench_bridge_mpi: {results[1]['params']} parameters, 8 workers x batch {a.batch}, adam, "
          f"{a.steps} steps (median), one torch thread a process")
    print(f"  1 process      {one * 1e3:8.1f} ms a step")
    print(f"  {a.ranks} ranks        {many * 1e3:8.1f} ms a step   speed-up {one / many:.2f}x "
          f"(target >= 1.7x for 2 ranks) -> {'ok' if one / many >= 1.7 else 'UNDER'}")
    print(f"  files against one process: #wrong {wrong} lines")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
