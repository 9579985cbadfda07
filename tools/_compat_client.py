"""The Python client as a public surface: `cairn.client.__all__` and each name's signature.

Integrators import `cairn.client` and nothing below it; what they rely on is each exported
name, and for each function or method: its parameters (name, kind, position, default,
whether it is required, annotation) and its return annotation; for each class: its public
methods, properties and constructor. A name whose docstring starts with `Experimental:` is
recorded as experimental and not held to the baseline (docs/compatibility.md).

Annotations are compared as written (the modules use `from __future__ import annotations`):
a changed annotation is reported, since a caller's types may no longer check.
"""

from __future__ import annotations

import inspect
import types
import typing
from types import ModuleType
from typing import Any, ForwardRef

EXPERIMENTAL_MARK = "Experimental:"
_DUNDERS = ("__init__", "__aenter__", "__aexit__", "__enter__", "__exit__", "__aiter__",
            "__iter__", "__call__")
"""Special methods a caller uses by syntax (`Client(...)`, `async with`, `for`)."""

_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "positional-only",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional or keyword",
    inspect.Parameter.VAR_POSITIONAL: "*args",
    inspect.Parameter.KEYWORD_ONLY: "keyword-only",
    inspect.Parameter.VAR_KEYWORD: "**kwargs",
}


def _text(annotation: Any) -> str | None:
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, ForwardRef):  # a msgspec Struct's generated constructor
        return str(annotation.__forward_arg__)
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def _experimental(obj: Any) -> bool:
    return (inspect.getdoc(obj) or "").lstrip().startswith(EXPERIMENTAL_MARK)


def _signature(func: Any, *, bound: bool) -> dict[str, Any]:
    try:
        sig = inspect.signature(func, eval_str=False)
    except (TypeError, ValueError):
        return {"signature": "unknown"}
    params: dict[str, Any] = {}
    position = 0
    for index, param in enumerate(sig.parameters.values()):
        if bound and index == 0 and param.name in ("self", "cls"):
            continue
        entry: dict[str, Any] = {"kind": _KINDS[param.kind],
                                 "required": param.default is inspect.Parameter.empty
                                 and param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD)}
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            position += 1
            entry["position"] = position
        if param.default is not inspect.Parameter.empty:
            entry["default"] = repr(param.default)
        if (annotation := _text(param.annotation)) is not None:
            entry["annotation"] = annotation
        params[param.name] = entry
    out: dict[str, Any] = {"params": params}
    if (returns := _text(sig.return_annotation)) is not None:
        out["returns"] = returns
    return out


def _function(func: Any, *, bound: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "function", "async": inspect.iscoroutinefunction(func),
                           **_signature(func, bound=bound)}
    if _experimental(func):
        out["experimental"] = True
    return out


def _member(cls: type[Any], name: str, raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, property):
        fget = raw.fget
        returns = _text(inspect.signature(fget, eval_str=False).return_annotation) \
            if fget is not None else None
        return {"kind": "property", **({"returns": returns} if returns else {})}
    if isinstance(raw, classmethod | staticmethod):
        entry = _function(raw.__func__, bound=isinstance(raw, classmethod))
        entry["kind"] = type(raw).__name__
        return entry
    if inspect.isfunction(raw):
        return _function(raw, bound=True)
    return None


def _class(cls: type[Any]) -> dict[str, Any]:
    members: dict[str, Any] = {}
    for klass in reversed(cls.__mro__[:-1]):  # the class's own definitions win
        for name, raw in vars(klass).items():
            if name.startswith("_") and name not in _DUNDERS:
                continue
            if (entry := _member(cls, name, raw)) is not None:
                members[name] = entry
    if "__init__" not in members:
        # A msgspec Struct's constructor is made for it: its fields, as keyword arguments.
        members["__init__"] = {"kind": "function", "async": False,
                               **_signature(cls, bound=False)}
    out: dict[str, Any] = {"kind": "class", "members": dict(sorted(members.items()))}
    if _experimental(cls):
        out["experimental"] = True
    return out


def _alias(obj: Any) -> dict[str, Any]:
    """A type alias: a Literal's values as keys (a new value is an addition), else its text."""
    if typing.get_origin(obj) is typing.Literal:
        return {"kind": "type alias", "literal": {str(v): True for v in typing.get_args(obj)}}
    return {"kind": "type alias", "value": _text(obj) or str(obj)}


def describe(module: ModuleType) -> dict[str, Any]:
    """Every name in `module.__all__` with what a caller relies on.

    Raises:
        ValueError: the module has no `__all__`, or it names something that is not there.
    """
    names = getattr(module, "__all__", None)
    if not isinstance(names, list | tuple):
        raise ValueError(f"{module.__name__} has no __all__: its public names are unknown")
    out: dict[str, Any] = {}
    for name in sorted(names):
        if not hasattr(module, name):
            raise ValueError(f"{module.__name__}.__all__ names {name!r}, which is not there")
        obj = getattr(module, name)
        if typing.get_origin(obj) is not None or isinstance(obj, types.UnionType):
            out[name] = _alias(obj)
        elif inspect.isclass(obj):
            out[name] = _class(obj)
        elif callable(obj):
            out[name] = _function(obj)
        else:
            out[name] = {"kind": "value", "type": type(obj).__name__}
    return {"module": module.__name__, "names": out}
