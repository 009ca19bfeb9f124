"""Every worker's gradient in one vmap pass (python/bitlab/_batched.py) against the per-worker
loop it replaces: the same gradients and losses to float rounding, the same bits on every call,
and a clear refusal (Unbatchable), with the model untouched, where one pass cannot apply.

Runs without the compiled extension: when `bitlab` is not importable, _batched.py is loaded
from the source tree by its path (it imports only torch, functorch and the standard library).
"""

import collections
import importlib.util
import math
import pathlib

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
EPS = torch.finfo(torch.float32).eps
WORKERS = 4


def _load_batched():
    """bitlab._batched from the package if it imports, else from python/bitlab/_batched.py."""
    try:
        from bitlab import _batched
        return _batched
    except ImportError:
        path = ROOT / "python" / "bitlab" / "_batched.py"
        spec = importlib.util.spec_from_file_location("bitlab_batched_under_test", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


batched = _load_batched()


# ---- models and their data --------------------------------------------------------------------

def mlp():
    return nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))


class SmallCNN(nn.Module):
    """conv 3x3 -> GroupNorm -> relu -> maxpool 2 -> linear."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.norm = nn.GroupNorm(4, 8)
        self.head = nn.Linear(8 * 14 * 14, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.norm(self.conv(x))), 2)
        return self.head(h.flatten(1))


class TinyTransformer(nn.Module):
    """Token + position embeddings, one pre-LN block (causal self-attention with a registered
    bool mask buffer, then an MLP with GELU), a linear head."""

    def __init__(self, vocab=20, d=16, heads=2, context=8):
        super().__init__()
        self.heads = heads
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", torch.tril(torch.ones(context, context, dtype=torch.bool)))

    def forward(self, idx):
        B, T = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(T))
        h = self.ln1(x)
        D = h.shape[-1]
        q, k, v = self.qkv(h).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // self.heads)
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, D))
        return self.head(x + self.mlp(self.ln2(x)))


def classification_loss(model, x, y):
    return F.cross_entropy(model(x), y)


def language_model_loss(model, idx, targets):
    logits = model(idx)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def image_batches(shape, n=WORKERS, b=16):
    return [(torch.randn(b, *shape), torch.randint(0, 10, (b,))) for _ in range(n)]


def token_batches(n=WORKERS, b=4, context=8, vocab=20):
    return [(torch.randint(0, vocab, (b, context)), torch.randint(0, vocab, (b, context)))
            for _ in range(n)]


# Each case: the model, its loss, its batches and K, the longest sum in its forward and backward
# (the reduction length the tolerance below scales with):
#   mlp          the 784-long dot products of the first layer
#   cnn          a conv weight's gradient sums over batch x positions, 16 x 28 x 28 = 12 544
#   transformer  the 4d = 64-long dot products of the MLP and b x T = 4 x 8 = 32 for the weights
CASES = {
    "mlp": (mlp, classification_loss, lambda: image_batches((784,)), 784),
    "cnn": (SmallCNN, classification_loss, lambda: image_batches((1, 28, 28)), 16 * 28 * 28),
    "transformer": (TinyTransformer, language_model_loss, token_batches, 64),
}


def make_case(key, seed=0):
    make_model, loss_fn, make_batches, reduction = CASES[key]
    torch.manual_seed(seed)
    model = make_model()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return model, params, loss_fn, make_batches(), reduction


def loop_gradients(model, params, loss_fn, batches):
    """The per-worker loop one pass replaces: each worker's forward and backward in turn."""
    grads, losses = [], []
    for batch in batches:
        model.zero_grad(set_to_none=True)
        loss = loss_fn(model, *batch)
        loss.backward()
        grads.append([p.grad.clone() for _, p in params])
        losses.append(loss.item())
    return grads, losses


# ---- the tolerance ----------------------------------------------------------------------------
#
# One pass and the loop do the same arithmetic in a different grouping: vmap folds the workers
# into the batch dimension (one gemm of n*b rows instead of n of b rows, so the BLAS may block the
# products differently), computes each worker's weight gradient as one slice of a batched
# matmul (bmm) or grouped convolution instead of a plain mm or convolution (a different kernel,
# with its own summation order), and decomposes some backward kernels (group and layer norm) into
# elementwise operators and sums. A sum of K float32 terms in two different orders differs by at
# most ~2 K eps sum|terms|; rounding errors of random sign grow like sqrt(K) eps instead.
# The tolerance is K eps G per element, G the model's largest gradient magnitude (a per-tensor
# scale fails where a gradient cancels to near zero: the conv bias before GroupNorm).
# Measured over these cases with seeds 0-9, 1 and 2 threads (torch 1.13.1 from Debian, OpenBLAS
# 0.3.21, oneDNN convolutions), the largest difference was 3.2 eps G (mlp), 20 eps G (cnn) and
# 1.1 eps G (transformer): 240, 600 and 60 times inside K eps G (784, 12 544, 64 eps G). A wrong
# worker or parameter is off by O(G), about 1/eps = 8e6 eps G (measured: reversing the worker
# order exceeds the tolerance 750 to 150 000 times), so the check cannot confuse the two.
# Losses: one cross-entropy, a mean of at most 32 terms after a log-softmax over <= 20 classes,
# done by the same kernels on more rows; measured at most 1.9 eps |loss|; the tolerance is 16.

LOSS_ULPS = 16


def gradient_tolerance(loop_grads, reduction):
    """K eps G: the largest difference in grouping alone can explain (see above)."""
    scale = max(g.abs().max().item() for worker in loop_grads for g in worker)
    return reduction * EPS * scale


def max_difference(grads, loop_grads):
    """max |one pass - loop| over every worker and parameter."""
    return max((grads[k][w] - g).abs().max().item()
               for w, worker in enumerate(loop_grads) for k, g in enumerate(worker))


@pytest.mark.parametrize("key", sorted(CASES))
def test_one_pass_equals_the_per_worker_loop(key):
    model, params, loss_fn, batches, reduction = make_case(key)
    grads, losses = batched.batched_gradients(model, params, loss_fn, batches)
    loop_grads, loop_losses = loop_gradients(model, params, loss_fn, batches)
    assert len(grads) == len(params)
    for g, (name, p) in zip(grads, params):
        assert g.shape == (WORKERS, *p.shape), name
        assert g.dtype == torch.float32 and g.is_contiguous(), name
    assert max_difference(grads, loop_grads) <= gradient_tolerance(loop_grads, reduction)
    assert losses.dtype == torch.float64 and losses.shape == (WORKERS,)
    for got, want in zip(losses.tolist(), loop_losses):
        assert abs(got - want) <= LOSS_ULPS * EPS * abs(want)


@pytest.mark.parametrize("key", sorted(CASES))
def test_the_check_catches_a_wrong_worker_order(key):
    """Planted error: worker order reversed. The equality test above must reject it."""
    model, params, loss_fn, batches, reduction = make_case(key)
    grads, _ = batched.batched_gradients(model, params, loss_fn, batches)
    loop_grads, _ = loop_gradients(model, params, loss_fn, batches)
    reversed_grads = [g.flip(0) for g in grads]
    tolerance = gradient_tolerance(loop_grads, reduction)
    # Measured: 754 (cnn), 1e4 (mlp), 1.5e5 (transformer) times the tolerance.
    assert max_difference(reversed_grads, loop_grads) > 100 * tolerance


@pytest.mark.parametrize("key", sorted(CASES))
def test_two_calls_give_the_same_bits(key):
    model, params, loss_fn, batches, _ = make_case(key)
    first_grads, first_losses = batched.batched_gradients(model, params, loss_fn, batches)
    second_grads, second_losses = batched.batched_gradients(model, params, loss_fn, batches)
    assert all(torch.equal(a, b) for a, b in zip(first_grads, second_grads))
    assert torch.equal(first_losses, second_losses)


def test_the_model_is_left_as_it_was():
    """No .grad written, parameters unchanged, the module's class restored."""
    model, params, loss_fn, batches, _ = make_case("transformer")
    before = [p.detach().clone() for _, p in params]
    batched.batched_gradients(model, params, loss_fn, batches)
    assert all(p.grad is None for _, p in params)
    assert all(torch.equal(p, b) for (_, p), b in zip(params, before))
    assert type(model) is TinyTransformer


# ---- what the bridge feeds it -----------------------------------------------------------------

def test_parameters_that_are_views_of_one_flat_array():
    """The bridge binds each p.data to a slice of one flat numpy-backed float32 array."""
    model, params, loss_fn, batches, reduction = make_case("mlp")
    flat = torch.from_numpy(np.zeros(sum(p.numel() for _, p in params), dtype=np.float32))
    offset = 0
    for _, p in params:
        view = flat[offset:offset + p.numel()].view(p.shape)
        view.copy_(p.detach())
        p.data = view
        offset += p.numel()
    grads, _ = batched.batched_gradients(model, params, loss_fn, batches)
    loop_grads, _ = loop_gradients(model, params, loss_fn, batches)
    assert max_difference(grads, loop_grads) <= gradient_tolerance(loop_grads, reduction)


def test_frozen_parameters_and_single_tensor_batches():
    """Only `params` are differentiated; a batch that is one tensor is a 1-tuple."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 1))
    model[0].weight.requires_grad_(False)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    batches = [torch.randn(3, 6) for _ in range(WORKERS)]

    def loss_fn(m, x):
        return m(x).square().mean()
    grads, _ = batched.batched_gradients(model, params, loss_fn, batches)
    loop_grads, _ = loop_gradients(model, params, loss_fn, [(x,) for x in batches])
    assert [n for n, _ in params] == ["0.bias", "2.weight", "2.bias"]
    assert max_difference(grads, loop_grads) <= gradient_tolerance(loop_grads, 6)


def test_tied_weights_get_both_contributions():
    """A weight shared by two modules is listed once by named_parameters(): both uses must see
    the batched replacement, or one use's share of the gradient would be lost."""
    torch.manual_seed(0)
    embed, head = nn.Embedding(12, 8), nn.Linear(8, 12, bias=False)
    head.weight = embed.weight
    model = nn.Sequential(embed, head)
    params = list(model.named_parameters())
    assert [n for n, _ in params] == ["0.weight"]
    batches = [(torch.randint(0, 12, (5,)), torch.randint(0, 12, (5,))) for _ in range(WORKERS)]
    grads, _ = batched.batched_gradients(model, params, classification_loss, batches)
    loop_grads, _ = loop_gradients(model, params, classification_loss, batches)
    assert max_difference(grads, loop_grads) <= gradient_tolerance(loop_grads, 12)


# ---- where one pass does not apply ------------------------------------------------------------

def batchnorm_model():
    layer1 = nn.Sequential(collections.OrderedDict(
        conv=nn.Conv2d(1, 4, 3, padding=1), bn=nn.BatchNorm2d(4), relu=nn.ReLU()))
    return nn.Sequential(collections.OrderedDict(
        layer1=layer1, pool=nn.AdaptiveAvgPool2d(1), flat=nn.Flatten(), head=nn.Linear(4, 10)))


def test_batchnorm_in_training_mode_is_refused_before_touching_it():
    torch.manual_seed(0)
    model = batchnorm_model().train()
    params = list(model.named_parameters())
    bn = model.layer1.bn
    mean, var = bn.running_mean.clone(), bn.running_var.clone()
    count = bn.num_batches_tracked.clone()
    with pytest.raises(batched.Unbatchable) as e:
        batched.batched_gradients(model, params, classification_loss, image_batches((1, 8, 8)))
    assert "BatchNorm2d 'layer1.bn'" in str(e.value) and "running statistics" in str(e.value)
    assert torch.equal(bn.running_mean, mean) and torch.equal(bn.running_var, var)
    assert torch.equal(bn.num_batches_tracked, count)


def test_batchnorm_in_eval_mode_works_and_updates_nothing():
    torch.manual_seed(0)
    model = batchnorm_model()
    model.layer1.bn.running_mean.uniform_(-0.5, 0.5)       # not the defaults: used, not skipped
    model.layer1.bn.running_var.uniform_(0.5, 2.0)
    model.eval()
    params = list(model.named_parameters())
    mean = model.layer1.bn.running_mean.clone()
    batches = image_batches((1, 8, 8))
    grads, _ = batched.batched_gradients(model, params, classification_loss, batches)
    loop_grads, _ = loop_gradients(model, params, classification_loss, batches)
    assert max_difference(grads, loop_grads) <= gradient_tolerance(loop_grads, 16 * 8 * 8)
    assert torch.equal(model.layer1.bn.running_mean, mean)


def test_dropout_in_training_mode_is_refused():
    model = nn.Sequential(collections.OrderedDict(
        fc=nn.Linear(784, 32), drop=nn.Dropout(0.1), head=nn.Linear(32, 10))).train()
    with pytest.raises(batched.Unbatchable) as e:
        batched.batched_gradients(model, list(model.named_parameters()), classification_loss,
                                  image_batches((784,)))
    assert "Dropout 'drop' draws random numbers in training mode" in str(e.value)
    model.eval()                                        # in eval mode dropout is the identity
    batched.batched_gradients(model, list(model.named_parameters()), classification_loss,
                              image_batches((784,)))


@pytest.mark.parametrize("middle", [nn.Dropout(0.0), nn.BatchNorm1d(32, track_running_stats=False)],
                         ids=["dropout_p0", "batchnorm_without_running_stats"])
def test_training_mode_modules_that_neither_draw_nor_update_are_batched(middle):
    """Dropout(p=0) draws nothing; BatchNorm without running statistics updates no buffer (its
    batch statistics are each worker's own under vmap, as in the loop)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 32), middle, nn.Linear(32, 10)).train()
    params = list(model.named_parameters())
    batches = image_batches((784,))
    grads, _ = batched.batched_gradients(model, params, classification_loss, batches)
    loop_grads, _ = loop_gradients(model, params, classification_loss, batches)
    assert max_difference(grads, loop_grads) <= gradient_tolerance(loop_grads, 784)


def test_batches_of_different_shapes_are_refused_naming_the_worker():
    model, params, loss_fn, batches, _ = make_case("mlp")
    batches[2] = (batches[2][0][:15], batches[2][1][:15])
    with pytest.raises(batched.Unbatchable) as e:
        batched.batched_gradients(model, params, loss_fn, batches)
    assert "worker 2's batch item 0 is (15, 784)" in str(e.value)
    assert "worker 0's (16, 784)" in str(e.value)


def test_a_loss_that_is_not_a_scalar_is_refused():
    model, params, _, batches, _ = make_case("mlp")

    def per_sample_loss(m, x, y):
        return F.cross_entropy(m(x), y, reduction="none")
    with pytest.raises(batched.Unbatchable, match=r"loss_fn returned \(16,\): must be a scalar"):
        batched.batched_gradients(model, params, per_sample_loss, batches)


def test_what_vmap_refuses_is_reported_with_its_first_line():
    """.item() in the loss cannot be batched: vmap's own error, named, one line."""
    model, params, _, batches, _ = make_case("mlp")

    def loss_with_item(m, x, y):
        loss = F.cross_entropy(m(x), y)
        return loss if loss.item() > 0 else -loss
    with pytest.raises(batched.Unbatchable) as e:
        batched.batched_gradients(model, params, loss_with_item, batches)
    assert str(e.value).startswith("vmap refused the model: RuntimeError: ")
    assert "\n" not in str(e.value)
    assert type(model) is nn.Sequential                 # the swapped class was restored


class StepCounter(nn.Module):
    """Counts its forward calls in a buffer: one pass would count once, the loop n times.
    in_place: `calls += 1` (grad refuses to mutate a captured tensor); else `calls = calls + 1`
    (a new tensor assigned to the buffer: allowed by vmap, caught by _batched's check)."""

    def __init__(self, in_place):
        super().__init__()
        self.in_place = in_place
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        if self.in_place:
            self.calls += 1
        else:
            self.calls = self.calls + 1
        return x


@pytest.mark.parametrize("in_place", [True, False])
def test_a_buffer_written_in_the_forward_is_refused_and_left_unchanged(in_place):
    model = nn.Sequential(collections.OrderedDict(count=StepCounter(in_place),
                                                  fc=nn.Linear(784, 10)))
    want = "in-place operation" if in_place else "the forward writes buffer 'count.calls'"
    with pytest.raises(batched.Unbatchable, match=want):
        batched.batched_gradients(model, list(model.named_parameters()), classification_loss,
                                  image_batches((784,)))
    assert model.count.calls.item() == 0
