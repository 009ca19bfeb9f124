"""The model and data both sides of the PowerSGD comparison use (test_powersgd_ddp.py and
scripts/ddp_powersgd_job.py): matrices of several shapes (two of the same shape, so the
hook's shape grouping matters), 1-D biases, and a last layer that is compressed at rank 1
and not at ranks 2 and 4 (a compressed and an uncompressed matrix in one bucket)."""

import torch

RANKS = 4
STEPS = 8


def build_model(width=32):
    """width 600 makes the 600 x 600 matrices over DDP's 1 MiB first bucket: several buckets."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(20, width), torch.nn.Tanh(),
        torch.nn.Linear(width, width), torch.nn.Tanh(),
        torch.nn.Linear(width, width), torch.nn.Tanh(),
        torch.nn.Linear(width, 3))


def batch(step, worker):
    g = torch.Generator().manual_seed(1000 * step + worker)
    x = torch.randn(16, 20, generator=g)
    y = torch.randn(16, 3, generator=g)
    return x, y


def loss_of(out, y):
    return torch.nn.functional.mse_loss(out, y)
