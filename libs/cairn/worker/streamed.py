"""Payloads that stream: a file, or a dict of arrays (a model's `state_dict`) written array by
array, sent through the job's payload store and read back chunk by chunk.

Neither end holds the payload twice: a sender reads its file a block at a time, or hands out
each array's own memory (no copy); a receiver writes the chunks to a file as they come, or
into arrays allocated once at their final size. The store checks the SHA-256 of the whole.

The arrays' layout, one record per array, in the dict's order:

    4 bytes (big-endian): n | n bytes: MessagePack [name, dtype, shape] | the array's bytes

where dtype is numpy's `dtype.str` of a plain numeric, bool or string dtype (nothing that
would need pickle) and the array is C-ordered.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from cairn.bus import ChunkSource, Objects, file_source
from cairn.errors import InvalidInput

if TYPE_CHECKING:
    import numpy as np

FILE, ARRAYS = "file", "arrays"
STREAMED_CODECS = (FILE, ARRAYS)
"""Envelope codecs whose payload stays in the store until the receiver reads it."""
_PLAIN_KINDS = "biufcmMSU"
_MAX_HEADER = 64 * 1024


def _numpy() -> Any:
    # numpy is optional for the SDK: only a worker that sends arrays needs it.
    import numpy

    return numpy


def file_payload(source: str | Path | ChunkSource) -> ChunkSource:
    """A file's bytes, or those a function makes (called twice: for the digest, to send)."""
    if callable(source):
        return source
    path = Path(source)
    if not path.is_file():
        raise InvalidInput(f"{path}: not a file to send", field="path")
    return file_source(path)


def arrays_payload(arrays: Mapping[str, Any]) -> ChunkSource:
    """The records of `arrays` (each array's own memory where it is C-contiguous)."""
    numpy = _numpy()
    checked: list[tuple[str, np.ndarray]] = []
    for name, value in arrays.items():
        arr = numpy.asarray(value)
        if arr.dtype.kind not in _PLAIN_KINDS:
            raise InvalidInput(f"cannot send array {name!r} of dtype {arr.dtype} (only plain "
                               "numeric, bool and string dtypes)")
        checked.append((str(name), arr))

    def records() -> Iterable[bytes | memoryview]:
        for name, arr in checked:
            header = msgspec.msgpack.encode([name, arr.dtype.str, list(arr.shape)])
            yield len(header).to_bytes(4, "big") + header
            # A copy only for an array that is not C-contiguous (a transposed view).
            flat = arr if arr.flags.c_contiguous else numpy.ascontiguousarray(arr)
            if flat.nbytes:
                yield memoryview(flat.reshape(-1).view(numpy.uint8))
    return records


class StoredPayload:
    """A payload left in the job's store, read when asked (a `Message.payload` whose envelope
    said `file` or `arrays`)."""

    def __init__(self, store: Objects, digest: str, size: int, codec: str) -> None:
        self.store, self.digest, self.size, self.codec = store, digest, size, codec

    def __repr__(self) -> str:
        return f"StoredPayload({self.codec}, {self.size} bytes, sha256 {self.digest[:12]})"

    def chunks(self) -> AsyncIterator[bytes]:
        """The payload's bytes chunk by chunk (the digest is checked after the last)."""
        return self.store.get_stream(self.digest, digest=self.digest)

    async def save(self, path: str | Path) -> Path:
        """Write the payload to `path` (there only once whole and checked)."""
        return await self.store.get_file(self.digest, Path(path), digest=self.digest)

    async def arrays(self) -> dict[str, np.ndarray]:
        """The arrays sent with `send_arrays`, each allocated once at its size.

        Raises:
            InvalidInput: the payload is not arrays, or its records are malformed.
        """
        if self.codec != ARRAYS:
            raise InvalidInput(f"this payload is a {self.codec}, not arrays")
        reader = _ArrayRecords(self.size)
        async for chunk in self.chunks():
            reader.feed(memoryview(chunk))
        return reader.finish()


class _ArrayRecords:
    """Parses the records of `arrays_payload` as chunks arrive."""

    def __init__(self, size: int) -> None:
        self.left = size
        self.out: dict[str, np.ndarray] = {}
        self._head = bytearray()
        self._want = 4  # bytes of the length prefix, then of the header
        self._target: memoryview | None = None  # the array being filled

    def feed(self, data: memoryview) -> None:
        while len(data):
            if self._target is not None:
                take = min(len(self._target), len(data))
                self._target[:take] = data[:take]
                self._target, data = self._target[take:], data[take:]
                if not len(self._target):
                    self._target = None
                continue
            take = min(self._want - len(self._head), len(data))
            self._head += data[:take]
            data = data[take:]
            self.left -= take
            if len(self._head) == self._want:
                self._header_done()

    def _header_done(self) -> None:
        numpy = _numpy()
        if self._want == 4:
            self._want = int.from_bytes(self._head, "big")
            self._head.clear()
            if not 0 < self._want <= _MAX_HEADER:
                raise InvalidInput(f"not an arrays payload: a header of {self._want} bytes")
            return
        try:
            name, dtype, shape = msgspec.msgpack.decode(bytes(self._head),
                                                        type=tuple[str, str, list[int]])
            kind = numpy.dtype(dtype).kind
        except (msgspec.DecodeError, msgspec.ValidationError, TypeError, ValueError,
                SyntaxError) as exc:
            raise InvalidInput(f"not an arrays payload: {exc}") from None
        if kind not in _PLAIN_KINDS or any(d < 0 for d in shape) or name in self.out:
            raise InvalidInput(f"not an arrays payload: array {name!r} {dtype} {shape}")
        nbytes = math.prod(shape) * numpy.dtype(dtype).itemsize
        if nbytes > self.left:
            raise InvalidInput(f"array {name!r} says {nbytes} bytes; {self.left} are left")
        arr = numpy.empty(shape, dtype=dtype)
        self.out[name] = arr
        self.left -= nbytes
        self._head.clear()
        self._want = 4
        if nbytes:
            self._target = memoryview(arr.reshape(-1).view(numpy.uint8))

    def finish(self) -> dict[str, np.ndarray]:
        if self._target is not None or self._head:
            raise InvalidInput("the arrays payload ends inside a record")
        return self.out
