"""Streamed payloads without a network: a dict of arrays written array by array and read back
from chunks cut anywhere is the same dict; malformed records are refused with one message."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cairn.bus._chunks import parts_of, rechunk
from cairn.errors import InvalidInput
from cairn.worker.streamed import _ArrayRecords, arrays_payload


def chunks_of(parts: Any, size: int) -> list[bytes]:
    async def collect() -> list[bytes]:
        return [c async for c in rechunk(parts, size)]
    return asyncio.run(collect())


def read_back(data: bytes, size: int) -> dict[str, np.ndarray]:
    reader = _ArrayRecords(len(data))
    for chunk in chunks_of([data], size):
        reader.feed(memoryview(chunk))
    return reader.finish()


def records(arrays: dict[str, Any]) -> bytes:
    return b"".join(bytes(p) for p in arrays_payload(arrays)())  # type: ignore[union-attr]


ARRAYS = st.dictionaries(
    st.text(min_size=1, max_size=8),
    hnp.arrays(dtype=st.sampled_from(["<f4", "<f8", "<i8", "|u1", "|b1", ">i2", "<U3"]),
               shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6)),
    max_size=4)


@settings(max_examples=40, deadline=None)
@given(ARRAYS, st.integers(min_value=1, max_value=97))
def test_arrays_read_back_from_chunks_cut_anywhere_are_the_arrays_sent(
        arrays: dict[str, np.ndarray], size: int) -> None:
    back = read_back(records(arrays), size)
    assert list(back) == list(arrays)
    for name, arr in arrays.items():
        assert back[name].dtype == arr.dtype and back[name].shape == arr.shape
        assert back[name].tobytes() == arr.tobytes()


def test_arrays_are_sent_from_their_own_memory_and_views_are_made_contiguous() -> None:
    weights = np.arange(12, dtype=np.float32).reshape(3, 4)
    parts = list(arrays_payload({"w": weights, "t": weights.T})())  # type: ignore[arg-type]
    assert isinstance(parts[1], memoryview) and parts[1].obj is not None
    assert np.shares_memory(np.asarray(parts[1]), weights)  # no copy of a C-ordered array
    back = read_back(b"".join(bytes(p) for p in parts), 5)
    np.testing.assert_array_equal(back["t"], weights.T)


@pytest.mark.parametrize(("data", "message"), [
    (b"\x00\x00\x00\x00", "a header of 0 bytes"),
    (b"\x7f\x00\x00\x00", "a header of"),
    (len(b"\x93\xa1w\xa3|O8\x90").to_bytes(4, "big") + b"\x93\xa1w\xa3|O8\x90", "array 'w'"),
    (b"\x00\x00\x00\x03abc", "not an arrays payload"),
])
def test_malformed_records_are_refused_with_one_message(data: bytes, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        read_back(data, 7)


def test_a_record_that_claims_more_bytes_than_the_payload_holds_is_refused() -> None:
    data = records({"w": np.zeros(1000, dtype=np.float64)})
    reader = _ArrayRecords(len(data) - 8)  # the object says it is shorter than the record
    with pytest.raises(InvalidInput, match=r"bytes; \d+ are left"):
        reader.feed(memoryview(data))
    truncated = _ArrayRecords(len(data))
    truncated.feed(memoryview(data[:-1]))
    with pytest.raises(InvalidInput, match="ends inside a record"):
        truncated.finish()


def test_rechunk_takes_sync_and_async_parts_and_cuts_exact_chunks() -> None:
    async def gen() -> Any:
        yield b"abc"
        yield memoryview(b"defgh")

    assert chunks_of(gen(), 3) == [b"abc", b"def", b"gh"]
    assert chunks_of([b"", b"ab", b"cd"], 3) == [b"abc", b"d"]

    async def collect() -> list[Any]:
        return [p async for p in parts_of([b"x"])]
    assert asyncio.run(collect()) == [b"x"]
