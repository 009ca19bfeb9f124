"""A bridge job as a user writes it, one script for one process and for mpirun -np R.

    python3 bridge_job.py OUT OPTIMIZER [loop|one_pass]
    mpirun -np 4 python3 bridge_job.py OUT OPTIMIZER [loop|one_pass]

A small model with matrices and 1-D biases, 8 workers, each worker's batch
drawn from (seed, worker, step): every process computes the same batches for
the workers it runs, so the results folder must not depend on R
(tests/python/test_mpi_bridge.py compares them byte for byte).
"""

import sys

import torch

import bitlab.torch

WORKERS, STEPS = 8, 12
OPTIMIZERS = {
    "adam": {"name": "adam", "lr": 0.01},
    "onebit_adam": {"name": "onebit_adam", "lr": 0.01, "freeze_step": 4},
    "zero_one_adam": {"name": "zero_one_adam", "lr": 0.01, "var_freeze_step": 4,
                      "local_step_scaler": 2, "local_step_clipper": 2},
    "loco": {"name": "loco", "lr": 0.01, "node_size": 4},
}


def batch(w, step):
    g = torch.Generator().manual_seed(1000 * step + w)
    return torch.randn(6, 5, generator=g), torch.randn(6, 3, generator=g)


def loss_fn(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def main(out, optimizer, mode="loop"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    sim = bitlab.torch.Simulation(model, workers=WORKERS, steps=STEPS, seed=1,
                                  optimizer=OPTIMIZERS[optimizer], out=out, eval_every=4,
                                  network={"preset": "ethernet_40g_v100x4"},
                                  compute={"step_ms": 5},
                                  evaluate=lambda m: {"eval_loss": loss_fn(m, *batch(99, 0)).item()})
    for step in range(1, STEPS + 1):
        if mode == "one_pass":
            sim.run_workers(loss_fn, [batch(w, step) for w in range(WORKERS)])
        else:
            for w in sim.local_workers:
                with sim.worker(w) as wk:
                    loss = loss_fn(model, *batch(w, step))
                    loss.backward()
                    wk.loss = loss.item()
        sim.step()
    summary = sim.close()
    if sim.rank == 0:
        print(summary["status"], sim.ranks, list(sim.local_workers))


if __name__ == "__main__":
    main(*sys.argv[1:])
