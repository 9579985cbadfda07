"""The data plane's payload codec: `bytes` as they are, anything else as MessagePack
(msgspec) where numpy arrays are an extension (dtype, shape, raw bytes). Nothing is ever
unpickled."""

from __future__ import annotations

import warnings
from typing import Any

import msgspec

from cairn.errors import InvalidInput
from cairn.events.decoding import decode_with

NDARRAY_EXT = 1  # msgpack extension code of a numpy array


def _numpy() -> Any:
    # numpy is optional for the SDK: only code that sends arrays has it installed.
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def _enc_hook(obj: Any) -> Any:
    np = _numpy()
    if np is not None and isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biufcmMSU":
            raise InvalidInput(f"cannot send an array of dtype {obj.dtype} (only plain "
                               "numeric, bool and string dtypes; objects would need pickle)")
        # Not ascontiguousarray: it turns a 0-d array into a 1-d one.
        arr = obj if obj.flags.c_contiguous else obj.copy(order="C")
        header = msgspec.msgpack.encode((arr.dtype.str, list(arr.shape)))
        data = len(header).to_bytes(4, "big") + header + arr.tobytes()
        return msgspec.msgpack.Ext(NDARRAY_EXT, data)
    if np is not None and isinstance(obj, np.generic):
        return obj.item()
    raise NotImplementedError(f"cannot send a {type(obj).__name__}: use bytes, numbers, "
                              "strings, lists, dicts or numpy arrays")


def _ext_hook(code: int, data: memoryview) -> Any:
    if code != NDARRAY_EXT:
        raise InvalidInput(f"unknown payload extension {code}")
    np = _numpy()
    if np is None:
        raise InvalidInput("a numpy array arrived but numpy is not installed")
    size = int.from_bytes(data[:4], "big")
    dtype, shape = msgspec.msgpack.decode(data[4:4 + size], type=tuple[str, list[int]])
    try:
        with warnings.catch_warnings():
            # A deprecated alias (`a`) is not what a sender of this version writes: garbage.
            warnings.simplefilter("error", DeprecationWarning)
            kind = np.dtype(dtype).kind
        if kind not in "biufcmMSU":
            raise InvalidInput(f"refusing an array of dtype {dtype}")
        # A copy: frombuffer over the message would be read-only and pin the whole buffer.
        return np.frombuffer(data[4 + size:], dtype=dtype).reshape(shape).copy()
    except (TypeError, ValueError, SyntaxError, DeprecationWarning) as exc:
        # A dtype numpy does not know (its parser raises SyntaxError for some, e.g. ","), a
        # shape the bytes do not fill: garbage, not a crash.
        raise InvalidInput(f"not an array: {exc}") from None


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_DECODER = msgspec.msgpack.Decoder(ext_hook=_ext_hook)


def encode_payload(payload: Any) -> tuple[str, bytes]:
    """(codec, bytes) of a payload: `raw` for bytes, `msgpack` for everything else."""
    if isinstance(payload, bytes | bytearray | memoryview):
        return "raw", bytes(payload)
    return "msgpack", _ENCODER.encode(payload)


def decode_payload(codec: str, data: bytes) -> Any:
    if codec == "raw":
        return data
    if codec == "msgpack":
        return decode_with(_DECODER, data)
    raise InvalidInput(f"unknown payload codec {codec!r}")
