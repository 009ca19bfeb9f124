#!/usr/bin/env python3
"""Every worker's gradient: n per-worker passes against one batched (vmap) pass.

For each model, with n workers of b samples each, timed in the same process:

  loop       n x (zero_grad(set_to_none) + forward + backward), one per worker:
             what the bridge's plain route runs
  one-pass   bitlab._batched.batched_gradients over the same n batches: every
             worker's gradient from one vmap(grad(loss)) pass
  one batch  forward + backward of ONE batch of n*b samples (the n batches
             concatenated): the limit, one gradient instead of n

Medians of --repeats rounds after --warmup rounds (the three take turns). The
target is one-pass within 1.3x of one batch. Before timing, the one-pass
gradients are checked against the loop's (max relative difference: `maxrel`).

Timings on a machine other processes use are erratic (on 2 cores with a build
running, 2 threads: up to 10x); the load average is printed before and after.

Models: the notebook's (notebooks/your_model.ipynb) SmallResNet on 28x28x1
images (n=8 x b=16) and TinyGPT (vocabulary 70, d=48, 4 heads, 2 layers,
context 32, n=8 x b=8); the definitions are copied below.

  /usr/bin/python3 tests/bench/bench_batched.py [--threads 2] [--repeats 7]
  (OpenMP waits passively, as under `import bitlab`; OMP_WAIT_POLICY=active: spinning)
  (--fallbacks: print the operators vmap runs without a batching rule)
"""

import argparse
import importlib.util
import math
import os
import pathlib
import re
import statistics
import time

# As `import bitlab` does (python/bitlab/_threads.py), OpenMP threads sleep rather than spin
# while they wait, unless the user chose: libgomp reads this once, when torch loads it. On a
# machine where other processes run (2 cores, a build), spinning threads made every timing here
# several times slower and erratic. OMP_WAIT_POLICY=active measures libgomp's default instead.
if not (os.environ.get("OMP_WAIT_POLICY") or os.environ.get("GOMP_SPINCOUNT")):
    os.environ["OMP_WAIT_POLICY"] = "passive"

import torch  # noqa: E402 (after the wait policy)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_batched():
    """python/bitlab/_batched.py, by path (bitlab/__init__ needs the compiled extension)."""
    spec = importlib.util.spec_from_file_location("bitlab_batched",
                                                  ROOT / "python" / "bitlab" / "_batched.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- the notebook's models (notebooks/your_model.ipynb), copied unchanged --------------------

class ResidualBlock(nn.Module):
    """conv 3x3 -> GroupNorm -> relu -> conv 3x3 -> GroupNorm, plus the input, -> relu."""

    def __init__(self, channels, groups=4):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(groups, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(groups, channels)

    def forward(self, x):
        h = F.relu(self.norm1(self.conv1(x)))
        return F.relu(x + self.norm2(self.conv2(h)))


class SmallResNet(nn.Module):
    """28x28 -> conv 16 -> maxpool -> residual block -> conv 32 stride 2 -> residual block
    -> global average pool -> linear 10."""

    def __init__(self, c1=16, c2=32, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, c1, 3, padding=1, bias=False), nn.GroupNorm(4, c1),
                                  nn.ReLU(), nn.MaxPool2d(2))                            # 14x14
        self.block1 = ResidualBlock(c1)
        self.down = nn.Sequential(nn.Conv2d(c1, c2, 3, stride=2, padding=1, bias=False),
                                  nn.GroupNorm(4, c2), nn.ReLU())                        # 7x7
        self.block2 = ResidualBlock(c2)
        self.head = nn.Linear(c2, classes)

    def forward(self, x):
        x = self.block2(self.down(self.block1(self.stem(x))))
        return self.head(x.mean(dim=(2, 3)))


GPT_CONTEXT = 32
VOCAB = 70          # the notebook's is len(VOCAB) from its corpus, about 70 characters


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, context):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(context, context, dtype=torch.bool)))

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // self.heads)
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d, heads, context):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), CausalSelfAttention(d, heads, context)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=VOCAB, d=48, heads=4, layers=2, context=GPT_CONTEXT):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.Sequential(*[Block(d, heads, context) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.ln(self.blocks(x)))


# ---- the cases --------------------------------------------------------------------------------

def cnn_case(n, b):
    """SmallResNet, n workers x b images of 28x28x1, cross-entropy."""
    batches = [(torch.randn(b, 1, 28, 28), torch.randint(0, 10, (b,))) for _ in range(n)]

    def loss_fn(model, x, y):
        return F.cross_entropy(model(x), y)
    return "SmallResNet", SmallResNet(), loss_fn, batches


def gpt_case(n, b):
    """TinyGPT, n workers x b windows of GPT_CONTEXT characters, next-character cross-entropy."""
    batches = []
    for _ in range(n):
        w = torch.randint(0, VOCAB, (b, GPT_CONTEXT + 1))
        batches.append((w[:, :-1].contiguous(), w[:, 1:].contiguous()))

    def loss_fn(model, idx, targets):
        logits = model(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return "TinyGPT", TinyGPT(), loss_fn, batches


# ---- the three timings ------------------------------------------------------------------------

def loop_pass(model, loss_fn, batches):
    """The per-worker passes: each worker's forward and backward in turn."""
    for batch in batches:
        model.zero_grad(set_to_none=True)
        loss_fn(model, *batch).backward()


def one_batch_pass(model, loss_fn, whole):
    """Forward and backward of the n batches as one: one gradient, the lower limit."""
    model.zero_grad(set_to_none=True)
    loss_fn(model, *whole).backward()


def median_ms(fns, repeats, warmup):
    """Median wall time in milliseconds of each of fns over `repeats` calls after `warmup`.
    The functions take turns (one call of each per round) so that a change in the machine's
    load during the run (another process building, frequency scaling) falls on all alike."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, t in zip(fns, times):
            start = time.perf_counter()
            fn()
            t.append(time.perf_counter() - start)
    return [1e3 * statistics.median(t) for t in times]


def max_relative_difference(batched, model, params, loss_fn, batches):
    """max |one-pass - loop| / max |loop| over every worker and parameter (the loop's own
    largest magnitude for each parameter tensor: stricter than the tests' model-wide scale)."""
    grads, _ = batched.batched_gradients(model, params, loss_fn, batches)
    worst = 0.0
    for w, batch in enumerate(batches):
        model.zero_grad(set_to_none=True)
        loss_fn(model, *batch).backward()
        for k, (_, p) in enumerate(params):
            scale = p.grad.abs().max().item() or 1.0
            worst = max(worst, (grads[k][w] - p.grad).abs().max().item() / scale)
    return worst


def blas_line():
    """The BLAS torch was built against (torch.__config__.show()'s BLAS_INFO) and the library
    actually loaded (Debian's libblas.so.3 is an alternative: reference BLAS or OpenBLAS)."""
    found = re.findall(r"BLAS_INFO=[^,]*", torch.__config__.show())
    torch.ones(8, 8) @ torch.ones(8, 8)             # makes sure the BLAS is loaded
    try:
        with open("/proc/self/maps") as maps:
            loaded = sorted({line.split()[-1] for line in maps
                             if "blas" in line.rsplit("/", 1)[-1] and ".so" in line})
    except OSError:
        loaded = []
    return (f"{found[0] if found else 'BLAS_INFO not reported'}; loaded: "
            f"{', '.join(loaded) or 'unknown'}")


def machine_line():
    """The CPU model and the load average (other processes skew wall-clock timings)."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as info:
            model = next(line.split(":", 1)[1].strip() for line in info
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{model}, {os.cpu_count()} CPUs, load average {load}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--models", default="cnn,gpt", help="comma-separated: cnn, gpt")
    ap.add_argument("--fallbacks", action="store_true",
                    help="warn for each operator vmap runs without a batching rule")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.fallbacks:                                 # private switch of torch 1.13's functorch
        torch._C._functorch._set_vmap_fallback_warning_enabled(True)
    batched = load_batched()
    cases = {"cnn": lambda: cnn_case(8, 16), "gpt": lambda: gpt_case(8, 8)}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {blas_line()}")
    wait = os.environ.get("OMP_WAIT_POLICY") or f"GOMP_SPINCOUNT={os.environ['GOMP_SPINCOUNT']}"
    print(f"machine: {machine_line()}; OpenMP wait policy {wait}")
    print(f"{'model':12s} {'n x b':>6s} {'loop ms':>8s} {'one-pass ms':>12s} "
          f"{'one batch ms':>13s} {'pass/batch':>11s} {'loop/pass':>10s} {'maxrel':>8s}")
    for key in a.models.split(","):
        name, model, loss_fn, batches = cases[key]()
        model.train()
        params = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
        whole = tuple(torch.cat(items) for items in zip(*batches))
        maxrel = max_relative_difference(batched, model, params, loss_fn, batches)
        loop, one, limit = median_ms(
            [lambda: loop_pass(model, loss_fn, batches),
             lambda: batched.batched_gradients(model, params, loss_fn, batches),
             lambda: one_batch_pass(model, loss_fn, whole)], a.repeats, a.warmup)
        shape = f"{len(batches)}x{len(batches[0][0])}"
        print(f"{name:12s} {shape:>6s} {loop:8.2f} {one:12.2f} {limit:13.2f} "
              f"{one / limit:11.2f} {loop / one:10.2f} {maxrel:8.1e}")
    print(f"after: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
