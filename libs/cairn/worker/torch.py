"""PyTorch in a worker: `state_dict`s to and from the data plane, and the workflows' terms.

    from cairn.worker import torch as ct

    model = Net().to(ct.device())
    def train(arrays, rnd, ctx):
        ct.load(model, arrays)                       # the global model, into the module
        for x, y in batches:
            loss = F.cross_entropy(model(x), y) + ct.proximal_term(model, ctx)   # FedProx
            opt.zero_grad(); loss.backward()
            ct.correct_gradients(model, ctx)         # SCAFFOLD (nothing for the others)
            opt.step()
        ctx.local_steps, ctx.local_lr = steps, lr
        return ct.arrays(model), len(dataset)

Copies: `arrays` gives numpy views of the (CPU) tensors' own memory, and `tensors` gives
tensors over the arrays' memory (`torch.from_numpy`), so the conversions copy nothing; a
tensor on a GPU is copied to the host once. The data plane then writes each array's bytes
into the message once, and reads them out once on the other side (docs/workflows.md has the
throughput, measured). `bfloat16` has no numpy dtype: such tensors travel as float32 and
come back as bfloat16 when loaded into a module.

torch is imported when a function here is first called: Cairn itself never needs it, and a
worker that does not have it gets one line saying so.

GPUs: the launcher gives a worker the GPUs its site allocated (`CUDA_VISIBLE_DEVICES`), so
`device()` is the first of those, or the CPU when the job asked for none.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from cairn.errors import CairnError

if TYPE_CHECKING:
    from cairn.worker.workflows import ClientRound


class TorchMissing(CairnError):
    """This worker's Python has no torch (install it, or use an image that has it)."""


def _torch() -> Any:
    try:
        # By name: the type checker need not read all of torch to check this module.
        torch = importlib.import_module("torch")
    except ImportError:
        raise TorchMissing("cairn.worker.torch needs PyTorch, and this worker's Python has "
                           "none: pip install torch, or give the job an image with it") from None
    return torch


def device() -> Any:
    """The device to train on: the first GPU the site allocated, else the CPU."""
    torch = _torch()
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def _state(source: Any) -> Mapping[str, Any]:
    state: Mapping[str, Any] = source.state_dict() if hasattr(source, "state_dict") else source
    return state


def arrays(source: Any) -> dict[str, np.ndarray]:
    """A module's (or a state_dict's) tensors as numpy arrays, sharing their memory where
    they are on the CPU. Non-float buffers (e.g. `num_batches_tracked`) come as they are."""
    torch = _torch()
    out: dict[str, np.ndarray] = {}
    for name, tensor in _state(source).items():
        t = tensor.detach()
        if t.dtype == torch.bfloat16:
            t = t.float()
        out[name] = t.cpu().numpy() if t.device.type != "cpu" else t.numpy()
    return out


def tensors(values: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Arrays as CPU tensors over the same memory (`torch.from_numpy`; read-only arrays,
    which torch cannot wrap, are copied)."""
    torch = _torch()
    out = {}
    for name, value in values.items():
        a = np.asarray(value)  # a numpy scalar (a 0-d buffer after arithmetic) is an array
        out[name] = torch.from_numpy(a if a.flags.writeable else a.copy())
    return out


def load(module: Any, values: Mapping[str, np.ndarray]) -> None:
    """Put `values` into `module` (`load_state_dict`, strict: a missing or unexpected name
    is an error naming it); dtypes and devices are the module's own."""
    module.load_state_dict(tensors(values), strict=True)


def proximal_term(module: Any, ctx: ClientRound) -> Any:
    """FedProx's `mu/2 * ||w - w_global||^2` over the module's parameters (0 when the
    workflow is not FedProx): add it to the loss."""
    torch = _torch()
    if not ctx.mu:
        return torch.zeros(())
    total = None
    for name, param in module.named_parameters():
        start = torch.as_tensor(ctx.global_model[name], device=param.device, dtype=param.dtype)
        term = (param - start).pow(2).sum()
        total = term if total is None else total + term
    return (ctx.mu / 2.0) * (total if total is not None else torch.zeros(()))


def correct_gradients(module: Any, ctx: ClientRound) -> None:
    """SCAFFOLD's correction: add `c - c_i` to every parameter's gradient, after
    `backward()` and before the optimiser's step (nothing for other workflows)."""
    if ctx.correction is None:
        return
    torch = _torch()
    with torch.no_grad():
        for name, param in module.named_parameters():
            if param.grad is not None:
                param.grad.add_(torch.as_tensor(ctx.correction[name], device=param.device,
                                                dtype=param.dtype))
