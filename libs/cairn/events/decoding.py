"""Decoding bus data without surprises: whatever the bytes, the one error is a decode error.

msgspec raises `RecursionError`, not `DecodeError`, for JSON or MessagePack nested deeper than
the interpreter's recursion limit (`[[[[...` a few thousand deep), in any field of any type.
A service catching decode errors to dead-letter garbage would miss exactly that message, so
every decoder of bus data goes through `decode_with`.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import msgspec

T_co = TypeVar("T_co", covariant=True)


class BytesDecoder(Protocol[T_co]):
    """A msgspec JSON or MessagePack decoder."""

    def decode(self, buf: Any, /) -> T_co: ...


def decode_with(decoder: BytesDecoder[T_co], data: bytes | bytearray | memoryview | str
                ) -> T_co:
    """`decoder.decode(data)`.

    Raises:
        msgspec.DecodeError: the data does not decode (`msgspec.ValidationError`, a subclass,
            when it decodes but does not fit the type), including when it is nested too deep.
    """
    try:
        return decoder.decode(data)
    except RecursionError:
        raise msgspec.DecodeError("nested too deeply to decode") from None
