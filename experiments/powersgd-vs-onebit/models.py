"""The two models and data sets of notebooks/your_model.ipynb (the same definitions, kept
here as a module so that a script can train them): SmallResNet on Fashion-MNIST and TinyGPT
on six fortune files, each split into iid shards of `workers` workers."""

import gzip
import math
import re
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FASHION = Path("/usr/share/datasets/fashion-mnist")
FORTUNES = Path("/usr/share/games/fortunes")
FORTUNE_FILES = ["fortunes", "literature", "riddles", "computers", "science", "wisdom"]
CONTEXT = 32


# ---- CNN ------------------------------------------------------------------------------------

def _read_idx(path):
    """An idx file (gzip) as a numpy array: magic 0 0 dtype ndim, then ndim big-endian sizes."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * k: 8 + 4 * k], "big") for k in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


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
    -> global average pool -> linear 10 (28 410 parameters in 20 tensors)."""

    def __init__(self, c1=16, c2=32, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, c1, 3, padding=1, bias=False), nn.GroupNorm(4, c1),
                                  nn.ReLU(), nn.MaxPool2d(2))
        self.block1 = ResidualBlock(c1)
        self.down = nn.Sequential(nn.Conv2d(c1, c2, 3, stride=2, padding=1, bias=False),
                                  nn.GroupNorm(4, c2), nn.ReLU())
        self.block2 = ResidualBlock(c2)
        self.head = nn.Linear(c2, classes)

    def forward(self, x):
        x = self.block2(self.down(self.block1(self.stem(x))))
        return self.head(x.mean(dim=(2, 3)))


def fashion_task(workers, seed):
    """(shards, loss_fn, evaluate): iid shards of the 60 000 standardised training images,
    the first 2 000 test images held out."""
    def images(name):
        raw = _read_idx(FASHION / f"{name}-images-idx3-ubyte.gz").copy()
        return torch.from_numpy(raw).float().div(255).unsqueeze(1)

    def labels(name):
        return torch.from_numpy(_read_idx(FASHION / f"{name}-labels-idx1-ubyte.gz").astype(np.int64))

    x_train, y_train = images("train"), labels("train")
    x_test, y_test = images("t10k")[:2000], labels("t10k")[:2000]
    mean, std = x_train.mean(), x_train.std()
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    order = torch.from_numpy(np.random.default_rng(seed).permutation(len(x_train)))
    shards = [(x_train[part], y_train[part]) for part in order.chunk(workers)]

    def evaluate(model):
        with torch.no_grad():
            logits = model(x_test)
        return {"eval_loss": F.cross_entropy(logits, y_test).item(),
                "eval_accuracy": (logits.argmax(1) == y_test).float().mean().item()}
    return shards, F.cross_entropy, evaluate


# ---- GPT ------------------------------------------------------------------------------------

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
    """Token + position embeddings, `layers` pre-LN blocks, final LayerNorm, untied head.
    d 48, 2 layers: 65 742 parameters in 30 tensors; d 160, 3 layers: about 0.96 M."""

    def __init__(self, vocab, d=48, heads=4, layers=2, context=CONTEXT):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.Sequential(*[Block(d, heads, context) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.ln(self.blocks(x)))


def fortunes_task(workers, seed):
    """(shards, loss_fn, evaluate, vocab): windows of CONTEXT + 1 characters of the fortunes,
    every tenth fortune held out (128 windows evaluated)."""
    fortunes = []
    for f in FORTUNE_FILES:
        if (FORTUNES / f).exists():
            text = (FORTUNES / f).read_text(encoding="utf-8", errors="replace")
            fortunes += [s.strip("\n") + "\n" for s in re.split(r"^%$", text, flags=re.M)
                         if s.strip()]
    if not fortunes:
        raise FileNotFoundError(f"no fortune files in {FORTUNES}: apt-get install fortunes")
    train_text = "".join(s for k, s in enumerate(fortunes) if k % 10)
    eval_text = "".join(s for k, s in enumerate(fortunes) if k % 10 == 0)
    chars, counts = np.unique(np.array(list(train_text)), return_counts=True)
    vocab = ["<unk>"] + sorted(str(c) for c, n in zip(chars, counts) if n >= 100)
    code_of = {ch: k for k, ch in enumerate(vocab)}

    def windows(text):
        ids = torch.tensor([code_of.get(ch, 0) for ch in text])
        return ids[: len(ids) // (CONTEXT + 1) * (CONTEXT + 1)].view(-1, CONTEXT + 1)

    train = windows(train_text)
    train = train[torch.from_numpy(np.random.default_rng(seed).permutation(len(train)))]
    shards = [(w[:, :-1], w[:, 1:]) for w in train.chunk(workers)]
    held = windows(eval_text)[:128]

    def loss_fn(logits, targets):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def evaluate(model):
        with torch.no_grad():
            logits = model(held[:, :-1])
        targets = held[:, 1:]
        return {"eval_loss": loss_fn(logits, targets).item(),
                "eval_accuracy": (logits.argmax(-1) == targets).float().mean().item()}
    return shards, loss_fn, evaluate, len(vocab)
