"""Every simulated worker's gradient in one batched pass (functorch's ``vmap`` of ``grad``).

The bridge's plain route runs the user's forward and backward once per worker: ``n`` small
passes, each too small to keep the BLAS and the thread pool busy, plus ``n`` times the Python
and dispatcher overhead. Here the per-worker batches are stacked to ``[n, ...]`` and one
``vmap(grad(loss))`` computes all ``n`` gradients at once: the parameters are shared (not
batched), so most operators fold the worker dimension into the batch dimension, and only the
weight gradients, which are per worker by definition, become batched matrix products.

What cannot be batched is refused with :class:`Unbatchable` before anything touches the model,
so a caller can fall back to the per-worker loop:

* a module that updates buffers in training mode (BatchNorm's running statistics): the loop
  updates them ``n`` times, one worker after another; vmap runs the forward once;
* a module that draws random numbers in training mode (dropout): vmap cannot reproduce the
  loop's ``n`` successive draws from the global generator;
* batches that differ in structure, shape or dtype across workers (they cannot be stacked);
* anything vmap itself refuses (``.item()`` in the forward, data-dependent control flow, an
  operator without a batching rule that cannot fall back): the first line of its message.

What one pass costs depends on how functorch batches each operator (tests/bench/
bench_batched.py measures it). Matrix products batch well: a small transformer's pass costs
about 1.3 times one forward and backward of all n batches as one. On torch 1.13 two operators
batch poorly: GroupNorm's backward is decomposed into some thirty small operators, and a
convolution's per-worker weight gradient becomes one grouped convolution (groups = n), which
oneDNN runs as im2col + gemm with many thread synchronisations; with 2 threads on a machine
where other processes compete for the cores, that one kernel can be a hundred times slower
than single-threaded. A caller that can afford it should time both routes on its first steps.

This module imports only torch, functorch and the standard library, so it works (and is
tested) without bitlab's compiled extension.
"""

import torch
import functorch
from torch.nn.utils import stateless as _stateless

__all__ = ["Unbatchable", "batched_gradients", "check_modules"]

# functional_call's context manager: runs arbitrary code (here the user's loss_fn, which calls
# model(...) itself) with the module's tensors replaced by the given ones. Private in torch 1.13
# (functional_call is its public wrapper, but it only calls module(*args), not a loss function).
_reparametrize = getattr(_stateless, "_reparametrize_module", None)


class Unbatchable(Exception):
    """Why the model cannot take every worker's gradient in one vmap pass (str(e) is a one-line
    reason a user can act on)."""


def batched_gradients(model, params, loss_fn, batches):
    """Every worker's loss and gradient in one pass with functorch's vmap and grad.

    model: torch.nn.Module. params: list of (name, torch.nn.Parameter) — the parameters to
    differentiate (those that require grad, in named_parameters() order); other parameters and
    buffers are held fixed.
    loss_fn(model, *batch) -> scalar tensor: worker w's loss on its batch (batch = batches[w], a
    tuple of tensors, or a single tensor which is treated as a 1-tuple).
    batches: a sequence of n per-worker batches; every worker's batch has the same structure,
    shapes and dtypes.

    Returns (grads, losses): grads a list, one float32 contiguous tensor per entry of params, of
    shape [n, *p.shape] (grads[k][w] is worker w's gradient of params[k]); losses a float64 1-D
    tensor of n values (each worker's loss).

    Raises Unbatchable(reason) when the one-pass form does not apply, before any side effect on
    the model: the model's parameters, their .grad and its buffers are never written.

    One difference from the loop: a parameter the loss does not use gets a zero gradient here,
    where the loop would leave its .grad None.
    """
    if _reparametrize is None:
        raise Unbatchable(f"torch {torch.__version__} has no "
                          f"torch.nn.utils.stateless._reparametrize_module to run loss_fn with "
                          f"swapped parameters; use the per-worker passes")
    stacked = _stack_batches(batches)
    check_modules(model)
    names = _tensor_paths(model, params)
    # The buffers are replaced by copies for the pass: a write the inspection did not foresee
    # lands in the copy (the model's own buffers stay untouched) and is detected afterwards.
    buffers = {path: b.clone() for path, b in _named_buffers(model)}
    versions = {path: b._version for path, b in buffers.items()}
    originals = dict(buffers)
    compute = functorch.vmap(_per_worker(model, names, loss_fn, buffers),
                             in_dims=(None,) + (0,) * len(stacked))
    try:
        # functorch.grad differentiates at its own level whatever the outer mode; no_grad keeps
        # torch's ordinary autograd from also recording a graph for a parameter outside `params`
        # that still requires grad (nothing would ever read it).
        with torch.no_grad():
            grads, losses = compute(tuple(p.detach() for _, p in params), *stacked)
    except RuntimeError as e:
        raise Unbatchable(_refusal(e)) from e
    _check_buffers_unchanged(buffers, originals, versions)
    # vmap returns the worker dimension first; for the shapes seen so far the result is already
    # contiguous and float32, so these are no-ops (no copy) unless the model is not float32.
    grads = [g.to(torch.float32).contiguous() for g in grads]
    return grads, losses.detach().to(torch.float64)


def check_modules(model):
    """Raises Unbatchable if a submodule would update buffers or draw random numbers in its
    forward: found by inspection, so nothing has run yet (the model is untouched)."""
    for name, module in model.named_modules():
        where = f"{type(module).__name__} '{name or '(the model)'}'"
        if not module.training:
            continue
        # _NormBase covers BatchNorm1d/2d/3d, SyncBatchNorm, the lazy ones and InstanceNorm.
        if isinstance(module, torch.nn.modules.batchnorm._NormBase) and module.track_running_stats:
            raise Unbatchable(
                f"{where} updates its running statistics in training mode; vmap cannot batch an "
                f"in-place buffer update (use model.eval(), GroupNorm/LayerNorm, "
                f"track_running_stats=False, or the per-worker passes)")
        if _draws_random(module):
            raise Unbatchable(
                f"{where} draws random numbers in training mode; vmap cannot reproduce the "
                f"per-worker passes' successive draws from torch's generator (use model.eval(), "
                f"p=0, or the per-worker passes)")


def _draws_random(module):
    """Whether a module in training mode draws random numbers in its forward."""
    if isinstance(module, torch.nn.modules.dropout._DropoutNd):
        return module.p > 0
    if isinstance(module, torch.nn.MultiheadAttention):
        return module.dropout > 0
    return isinstance(module, torch.nn.RReLU)


def _stack_batches(batches):
    """The per-worker batches stacked to one tuple of [n, ...] tensors (one per batch item)."""
    tuples = [tuple(b) if isinstance(b, (tuple, list)) else (b,) for b in batches]
    if not tuples:
        raise ValueError("batches: empty; need one batch per worker")
    first = tuples[0]
    for k, item in enumerate(first):
        if not isinstance(item, torch.Tensor):
            raise Unbatchable(f"worker 0's batch item {k} is a {type(item).__name__}: every "
                              f"batch item must be a tensor to be stacked across workers")
    for w, batch in enumerate(tuples[1:], start=1):
        if len(batch) != len(first):
            raise Unbatchable(f"worker {w}'s batch has {len(batch)} items, worker 0's "
                              f"{len(first)}: the workers' batches must have the same structure")
        for k, (a, b) in enumerate(zip(first, batch)):
            if not isinstance(b, torch.Tensor) or b.shape != a.shape or b.dtype != a.dtype:
                got = (f"{tuple(b.shape)} {b.dtype}" if isinstance(b, torch.Tensor)
                       else type(b).__name__)
                raise Unbatchable(f"worker {w}'s batch item {k} is {got}, worker 0's "
                                  f"{tuple(a.shape)} {a.dtype}: the workers' batches must have "
                                  f"the same shapes and dtypes to be stacked")
    return tuple(torch.stack(items) for items in zip(*tuples))


def _tensor_paths(model, params):
    """For each entry of params, every path under which the model holds that parameter (a tied
    weight is held by several modules; each must see the replacement, or its share of the
    gradient would be lost)."""
    index = {id(p): k for k, (_, p) in enumerate(params)}
    paths = [[] for _ in params]
    for prefix, module in model.named_modules():
        for local, t in module._parameters.items():
            if t is not None and id(t) in index:
                paths[index[id(t)]].append(f"{prefix}.{local}" if prefix else local)
    for (name, _), found in zip(params, paths):
        if not found:
            raise ValueError(f"params: '{name}' is not a parameter of the model")
    return paths


def _named_buffers(model):
    """(path, buffer) of every buffer of every submodule, tied ones under each path."""
    for prefix, module in model.named_modules():
        for local, b in module._buffers.items():
            if b is not None:
                yield (f"{prefix}.{local}" if prefix else local), b


def _per_worker(model, paths, loss_fn, buffers):
    """One worker's (gradients, loss) as a function of (parameters, *batch items): the function
    vmap maps over the workers' stacked batches."""
    def loss_of(tensors, batch):
        swapped = dict(buffers)
        for t, where in zip(tensors, paths):
            swapped.update((path, t) for path in where)
        with _reparametrize(model, swapped):
            loss = loss_fn(model, *batch)
        # Written back so that a buffer the forward reassigns is seen by the check afterwards
        # (the swapped module's __setattr__ writes into `swapped`).
        buffers.update((k, swapped[k]) for k in buffers)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise Unbatchable(f"loss_fn returned {shape}: must be a scalar tensor (one loss per "
                              f"worker)")
        loss = loss.reshape(())        # a [1]-shaped loss is what .backward() accepts too
        return loss, loss.detach()

    grad_and_loss = functorch.grad(loss_of, has_aux=True)

    def per_worker(tensors, *batch):
        return grad_and_loss(tensors, batch)

    return per_worker


def _check_buffers_unchanged(buffers, originals, versions):
    """Raises Unbatchable if the forward wrote a buffer (into the pass's copy): the loop would
    have written it once per worker, one pass cannot."""
    for path, b in buffers.items():
        if b is not originals[path] or b._version != versions[path]:
            raise Unbatchable(f"the forward writes buffer '{path}'; one batched pass cannot "
                              f"reproduce the per-worker passes' successive updates (the "
                              f"model's buffer was left unchanged; use the per-worker passes)")


def _refusal(error):
    """A one-line reason from an exception vmap or grad raised."""
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else ""
    return f"vmap refused the model: {type(error).__name__}: {first} (use the per-worker passes)"
