"""Real DistributedDataParallel with torch's powerSGD_hook, over gloo on the loopback.

    python3 ddp_powersgd_job.py OUT.pt CASES.json

Starts R = 4 processes (torch.multiprocessing, gloo, 127.0.0.1). For each case
of CASES.json (the PowerSGDState fields, "bucket_cap_mb", "lr", "width") every rank builds
the same model (tests/python/powersgd_case.py), wraps it in DDP with the hook,
and runs STEPS steps of torch.optim.SGD on its own batches. Rank 0 saves, per
case, the parameters after every step and the buckets the hook saw (parameter
indices per bucket, per step) to OUT.pt.
"""

import json
import os
import pathlib
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from powersgd_case import RANKS, STEPS, batch, build_model, loss_of  # noqa: E402


def run_case(rank, case):
    model = build_model(case.get("width", 32))
    index = {id(p): k for k, p in enumerate(model.parameters())}
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, bucket_cap_mb=case.get("bucket_cap_mb", 25))
    fields = {k: v for k, v in case.items() if k not in ("bucket_cap_mb", "lr", "width", "hook")}
    state = psgd.PowerSGDState(process_group=None, **fields)
    seen = []

    def hook(st, bucket):
        seen.append((st.iter, bucket.index(), [index[id(p)] for p in bucket.parameters()]))
        if case.get("hook") == "allreduce":
            # DDP's default exchange, only to see its buckets: PowerSGD over
            # several buckets aborts inside gloo in torch 1.13 here (two ranks
            # pair allreduces of different buckets: "op.preamble.length <=
            # op.nbytes"), so the several-bucket case checks the buckets alone.
            st.maybe_increase_iter(bucket)
            return default_hooks.allreduce_hook(None, bucket)
        return psgd.powerSGD_hook(st, bucket)

    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=case["lr"])
    trace = []
    for step in range(STEPS):
        x, y = batch(step, rank)
        opt.zero_grad()
        loss_of(ddp(x), y).backward()
        opt.step()
        trace.append([p.detach().clone() for p in model.parameters()])
    return {"params": trace, "buckets": seen}


def main_rank(rank, out, cases):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    dist.init_process_group("gloo", rank=rank, world_size=RANKS)
    torch.set_num_threads(1)
    results = [run_case(rank, c) for c in cases]
    if rank == 0:
        torch.save(results, out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    out, cases_file = sys.argv[1], sys.argv[2]
    cases = json.loads(pathlib.Path(cases_file).read_text())
    os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT", "29533")
    mp.spawn(main_rank, args=(out, cases), nprocs=RANKS, join=True)
