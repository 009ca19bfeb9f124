#!/usr/bin/env python3
"""What the PyTorch bridge (bitlab.torch) adds to torch's own forward and backward.

A 1 M-parameter MLP (784-1024-256-10, 1 068 810 parameters) at 8 workers,
batch 64 each. Per step, timed in the same process, alternating:

  torch      8 x (zero_grad(set_to_none) + forward + backward): torch alone
  blocks     the same 8 passes inside `with sim.worker(w)`: the checks and the
             one copy of each worker's gradient into bitlab's rows
  check      sim.step()'s pass over the rows for NaN and inf (timed by the
             bridge itself: BridgeRun.copy_seconds)
  step       all of sim.step(): the check, bitlab's exchange and the update

The bridge's overhead is (blocks - torch) + check; the target is <= 10 % of
torch. Medians over --repeats steps after --warmup steps.

The check printed beside the figures (#wrong, as nccl-tests prints it): on
the last step, every gradient value bitlab took from each worker's block,
against the gradient torch computed alone for that worker at the same
parameters (bit for bit: the bridge copies, it does no arithmetic).

  PYTHONPATH=build/python /usr/bin/python3 tests/bench/bench_bridge.py
  (--tiny: the smoke run's sizes, nothing to read into the figures)
"""

import argparse
import statistics
import sys
import tempfile
import time

import torch

import bitlab.torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--widths", default="1024,256")
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--optimizer", default="adam")
    ap.add_argument("--threads", type=int, default=0, help="torch and bitlab threads (0: default)")
    ap.add_argument("--tiny", action="store_true", help="smoke-run sizes")
    a = ap.parse_args()
    if a.tiny:
        a.workers, a.batch, a.widths, a.repeats, a.warmup = 2, 4, "16", 2, 1
    if a.threads:
        torch.set_num_threads(a.threads)
    sizes = [784] + [int(w) for w in a.widths.split(",")] + [10]
    layers = []
    for i in range(len(sizes) - 1):
        layers += [torch.nn.Linear(sizes[i], sizes[i + 1]), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    params = sum(p.numel() for p in model.parameters())
    steps = a.warmup + a.repeats
    x = torch.randn(a.workers, a.batch, sizes[0])
    y = torch.randint(0, 10, (a.workers, a.batch))
    loss_fn = torch.nn.functional.cross_entropy

    with tempfile.TemporaryDirectory() as tmp:
        sim = bitlab.torch.Simulation(model, workers=a.workers, steps=steps, seed=1,
                                      optimizer={"name": a.optimizer, "lr": 1e-4},
                                      out=f"{tmp}/run", threads=a.threads)
        t_torch, t_blocks, t_copy, t_step = [], [], [], []
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
            for w in range(a.workers):
                with sim.worker(w) as wk:
                    loss = loss_fn(model(x[w]), y[w])
                    loss.backward()
                    wk.loss = loss.item()
            t2 = time.perf_counter()
            for w, want in enumerate(torch_grads):
                got = torch.as_tensor(sim._run.grad_row(w))[: want.numel()]
                total += want.numel()
                wrong += int((got.view(torch.int32) != want.view(torch.int32)).sum())
            copy_before = sim._run.copy_seconds
            sim.step()
            t3 = time.perf_counter()
            if step >= a.warmup:
                t_torch.append(t1 - t0)
                t_blocks.append(t2 - t1)
                t_copy.append(sim._run.copy_seconds - copy_before)
                t_step.append(t3 - t2)
        sim.close()

    med = statistics.median
    overhead = [(b - t) + c for t, b, c in zip(t_torch, t_blocks, t_copy)]
    ratio = [o / t for o, t in zip(overhead, t_torch)]
    print(f"bench_bridge: {params} parameters, {a.workers} workers x batch {a.batch}, "
          f"{a.optimizer}, {a.repeats} steps (median; min-max)")
    for name, v in (("torch fwd+bwd", t_torch), ("bridge blocks", t_blocks),
                    ("row check", t_copy), ("sim.step()", t_step)):
        print(f"  {name:14s} {med(v) * 1e3:9.2f} ms  ({min(v) * 1e3:.2f}-{max(v) * 1e3:.2f})")
    print(f"  bridge overhead {med(overhead) * 1e3:8.2f} ms = {med(ratio) * 100:.1f} % of torch "
          f"(limit 10 %) -> {'ok' if med(ratio) <= 0.10 else 'OVER'}")
    print(f"  check gradients taken: #wrong {wrong} of {total} (against torch's own, per worker)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
