"""Models as trees of arrays: a dict (nested or flat, as a `state_dict`), a list or tuple, or
one array. Workflows work on the leaves in a fixed order and build the same shape back.

Leaf names are dotted paths (`fc1.weight`, `layers.0.bias`): what privacy filters match.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from cairn.errors import InvalidInput

Model = Any
Leaves = list[np.ndarray]


def names(model: Model) -> list[str]:
    """The dotted name of every leaf, in leaf order."""
    return [name for name, _ in _walk(model, "")]


def leaves(model: Model) -> Leaves:
    """Every leaf as a float64 array (a copy only where the dtype changes)."""
    return [np.asarray(leaf, dtype=np.float64) for _, leaf in _walk(model, "")]


def _walk(node: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key in node:
            yield from _walk(node[key], f"{prefix}{key}.")
    elif isinstance(node, list | tuple):
        for index, item in enumerate(node):
            yield from _walk(item, f"{prefix}{index}.")
    else:
        yield prefix[:-1], node


def rebuild(like: Model, values: Sequence[np.ndarray]) -> Model:
    """A model shaped like `like` with `values` as its leaves, each cast back to the dtype
    (and 0-d-ness) of the leaf it replaces."""
    it = iter(values)

    def build(node: Any) -> Any:
        if isinstance(node, dict):
            return {key: build(item) for key, item in node.items()}
        if isinstance(node, list | tuple):
            return type(node)(build(item) for item in node)
        value = next(it)
        if isinstance(node, np.ndarray):
            return np.asarray(value, dtype=node.dtype).reshape(node.shape)
        if isinstance(node, int | float) and not isinstance(node, bool):
            return type(node)(np.asarray(value).item())
        return value

    return build(like)


def same_shape(model: Model, other: Model, who: str) -> Leaves:
    """The leaves of `other`, checked against `model`'s names and shapes.

    Raises:
        InvalidInput: `other` has other names or shapes (a client sent a different model).
    """
    mine, theirs = names(model), names(other)
    if mine != theirs:
        missing = sorted(set(mine) - set(theirs))[:3]
        extra = sorted(set(theirs) - set(mine))[:3]
        raise InvalidInput(f"{who} sent a model with other parameters (missing: "
                           f"{', '.join(missing) or 'none'}; unexpected: "
                           f"{', '.join(extra) or 'none'})")
    out = leaves(other)
    for name, a, b in zip(mine, leaves(model), out, strict=True):
        if a.shape != b.shape:
            raise InvalidInput(f"{who} sent {name} of shape {b.shape}, expected {a.shape}")
    return out


def zeros_like(values: Leaves) -> Leaves:
    return [np.zeros_like(v) for v in values]


def combine(fn: Callable[..., np.ndarray], *trees: Leaves) -> Leaves:
    """`fn` applied leaf by leaf across several leaf lists."""
    return [fn(*parts) for parts in zip(*trees, strict=True)]


def weighted_mean(updates: Sequence[Leaves], weights: Sequence[float]) -> Leaves:
    """sum(w_i * x_i) / sum(w_i), leaf by leaf."""
    total = float(sum(weights))
    if total <= 0:
        raise InvalidInput("the updates carry no samples to weigh them by")
    out = [u * weights[0] for u in updates[0]]
    for update, weight in zip(updates[1:], weights[1:], strict=True):
        for acc, leaf in zip(out, update, strict=True):
            acc += leaf * weight
    return [acc / total for acc in out]


def norm(values: Leaves) -> float:
    """The L2 norm of all leaves together."""
    return float(np.sqrt(sum(float(np.vdot(v, v)) for v in values)))
