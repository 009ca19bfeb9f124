#!/usr/bin/env python3
"""What the PyTorch bridge (bitlab.torch) adds to torch's own forward and backward.

A 1 M-parameter MLP (784-1024-256-10, 1 068 810 parameters) at 8 workers,
batch 64 each. Per step, timed in the same process, alternating:

  torch      8 x (zero_grad(set_to_none) + forward + backward): torch alone
  blocks     the same 8 passes inside `with sim.worker(w)`: the checks, and
             bitlab taking each worker's gradient as its block ends (read
             once into the gradients' mean or the optimizer's worker stage,
             the finiteness check in the same pass)
  take       the part of `blocks` spent in bitlab's take (BridgeRun.take_seconds)
  step       sim.step(): the mean's last pass, bitlab's exchange and the update
  floor      sim.step()'s memory floor: the bytes its passes must move (the
             mean's root pass, read 1 + write 1 row; the grad_norm metric, read
             1; Adam's update, read x, m, v, g + write x, m, v: 10 rows of
             4-byte floats) at the machine's memory bandwidth (a triad over
             rows of 2^24 floats, far larger than the caches, in this process)

The bridge's overhead is blocks - torch; the target is <= 3 % of torch, and
sim.step() within 1.2x of its floor. Medians over --repeats steps after
--warmup steps. The BLAS torch calls is printed first (python/bitlab/_blas.py).

The check printed beside the figures (#wrong, as nccl-tests prints it): on
the last step, the gradients' mean bitlab's Adam read, against the same fixed
pairwise tree (mean_over_workers: split at lo + n/2, fp32 adds, divide by n)
of the gradients torch computed alone for each worker at the same
parameters: bit for bit.

  PYTHONPATH=build/python /usr/bin/python3 tests/bench/bench_bridge.py
  (--tiny: the smoke run's sizes, nothing to read into the figures)
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

import bitlab.torch
from bitlab._blas import torch_blas


def tree_sum(rows, lo, hi):
    """mean_over_workers' tree (sim/kernels/worker_mean.cpp): left + right, split at lo + n/2."""
    if hi - lo == 1:
        return rows[lo].clone()
    mid = lo + (hi - lo) // 2
    return tree_sum(rows, lo, mid) + tree_sum(rows, mid, hi)


def triad_bytes_per_s(n=1 << 24, repeats=5):
    """Memory bandwidth: a = b + s*c over rows of n floats (12 bytes an element), median, on
    every core (as bitlab's step runs)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    b, c, a = torch.rand(n), torch.rand(n), torch.empty(n)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.add(b, c, alpha=0.5, out=a)
        times.append(time.perf_counter() - t0)
    torch.set_num_threads(threads)
    return 12 * n / statistics.median(times)


def make_model(widths):
    sizes = [784] + [int(w) for w in widths.split(",")] + [10]
    layers = []
    for i in range(len(sizes) - 1):
        layers += [torch.nn.Linear(sizes[i], sizes[i + 1]), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--widths", default="1024,256")
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch and bitlab threads (0: default)")
    ap.add_argument("--tiny", action="store_true", help="smoke-run sizes")
    a = ap.parse_args()
    if a.tiny:
        a.workers, a.batch, a.widths, a.repeats, a.warmup = 2, 4, "16", 2, 1
    if a.threads:
        torch.set_num_threads(a.threads)
    kind, path = torch_blas()
    print(f"torch BLAS: {kind} {path}, {torch.get_num_threads()} threads")
    model = make_model(a.widths)
    params = sum(p.numel() for p in model.parameters())
    steps = a.warmup + a.repeats
    x = torch.randn(a.workers, a.batch, 784)
    y = torch.randint(0, 10, (a.workers, a.batch))
    loss_fn = torch.nn.functional.cross_entropy

    with tempfile.TemporaryDirectory() as tmp:
        sim = bitlab.torch.Simulation(model, workers=a.workers, steps=steps, seed=1,
                                      optimizer={"name": "adam", "lr": 1e-4},
                                      out=f"{tmp}/run", threads=a.threads)
        t_torch, t_blocks, t_take, t_step = [], [], [], []
        floor_s = 10 * 4 * params / triad_bytes_per_s()
        wrong = total = 0
        for step in range(steps):
            last = step == steps - 1
            torch_grads = []
            t0 = time.perf_counter()
            for w in range(a.workers):
                model.zero_grad(set_to_none=True)
                loss_fn(model(x[w]), y[w]).backward()
                if last:
                    torch_grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
            t1 = time.perf_counter()
            model.zero_grad(set_to_none=True)
            take_before = sim._run.take_seconds
            for w in range(a.workers):
                with sim.worker(w) as wk:
                    loss = loss_fn(model(x[w]), y[w])
                    loss.backward()
                    wk.loss = loss.item()
            t2 = time.perf_counter()
            take = sim._run.take_seconds - take_before
            sim.step()
            t3 = time.perf_counter()
            if last:
                want = tree_sum(torch_grads, 0, a.workers) / a.workers
                got = torch.as_tensor(sim._run.gradient_mean())
                total += want.numel()
                wrong += int((got.view(torch.int32) != want.view(torch.int32)).sum())
            if step >= a.warmup:
                t_torch.append(t1 - t0)
                t_blocks.append(t2 - t1)
                t_take.append(take)
                t_step.append(t3 - t2)
                t_floor = [floor_s]
        sim.close()

    med = statistics.median
    overhead = [b - t for t, b in zip(t_torch, t_blocks)]
    ratio = [o / t for o, t in zip(overhead, t_torch)]
    step_ratio = [s / floor_s for s in t_step]
    print(f"bench_bridge: {params} parameters, {a.workers} workers x batch {a.batch}, adam, "
          f"{a.repeats} steps (median; min-max)")
    for name, v in (("torch fwd+bwd", t_torch), ("bridge blocks", t_blocks),
                    ("of which take", t_take), ("sim.step()", t_step), ("step floor", t_floor)):
        print(f"  {name:14s} {med(v) * 1e3:9.2f} ms  ({min(v) * 1e3:.2f}-{max(v) * 1e3:.2f})")
    print(f"  bridge overhead {med(overhead) * 1e3:8.2f} ms = {med(ratio) * 100:.1f} % of torch "
          f"(limit 3 %) -> {'ok' if med(ratio) <= 0.03 else 'OVER'}")
    print(f"  sim.step() / floor {med(step_ratio):.2f}x (limit 1.2x) -> "
          f"{'ok' if med(step_ratio) <= 1.2 else 'OVER'}")
    print(f"  check gradient mean: #wrong {wrong} of {total} (against torch's own gradients, "
          f"mean_over_workers' tree)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
