"""The data plane in memory: payload codec, object-store references, delivery of messages sent
before the receiver listened, request/reply. A fake bus stands in for NATS (no network)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cairn.errors import InvalidInput, Timeout
from cairn.worker import dataplane
from cairn.worker.dataplane import DataPlane, Message, RemoteError, decode_payload, encode_payload
from tests.subject_match import matches

# -- codec ------------------------------------------------------------------------------------


def roundtrip(value: Any) -> Any:
    codec, data = encode_payload(value)
    return decode_payload(codec, data)


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(dtype=st.sampled_from(["<f8", "<f4", "<i8", "<u1", "|b1", ">i4", "<c16"]),
                  shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)))
def test_numpy_arrays_roundtrip_exactly(arr: np.ndarray) -> None:
    back = roundtrip({"a": arr})["a"]
    assert back.dtype == arr.dtype and back.shape == arr.shape
    assert back.tobytes() == arr.tobytes()  # bit for bit, NaNs included


def test_nested_payloads_and_views_roundtrip_writable() -> None:
    arr = np.arange(12.0).reshape(3, 4)
    value = {"round": 3, "model": {"w": arr.T, "b": [arr[0], np.float32(1.5)]}, "s": "x"}
    back = roundtrip(value)
    np.testing.assert_array_equal(back["model"]["w"], arr.T)  # non-contiguous view sent
    assert back["model"]["b"][1] == 1.5 and back["round"] == 3 and back["s"] == "x"
    back["model"]["w"][0, 0] = 99.0  # decoded arrays are the receiver's own


def test_bytes_travel_raw() -> None:
    assert encode_payload(b"\x00\x01") == ("raw", b"\x00\x01")
    assert roundtrip(bytearray(b"ab")) == b"ab"


def test_object_arrays_and_unknown_types_are_refused() -> None:
    with pytest.raises(InvalidInput, match="dtype object"):
        encode_payload(np.array([object()], dtype=object))
    with pytest.raises(NotImplementedError, match="cannot send a PosixPath"):
        encode_payload({"p": Path("/etc")})
    with pytest.raises(InvalidInput, match="codec"):
        decode_payload("pickle", b"")


# -- a fake bus: core subscriptions with wildcards, a stream, an object store -----------------


@dataclass
class FakeMsg:
    subject: str
    data: bytes


@dataclass
class FakeReplayed:
    raw: bytes
    seq: int = 0


class FakeSub:
    def __init__(self, bus: FakeBus, entry: tuple[str, Any]) -> None:
        self.bus, self.entry = bus, entry

    async def unsubscribe(self) -> None:
        self.bus.subs.remove(self.entry)


class FakeNC:
    max_payload = 1024 * 1024


class FakeBus:
    def __init__(self) -> None:
        self.nc = FakeNC()
        self.subs: list[tuple[str, Callable[[FakeMsg], Awaitable[None]]]] = []
        self.stream: list[FakeMsg] = []

    async def ensure(self, *specs: Any) -> None:
        return None

    async def subscribe_core(self, subject: str, cb: Any) -> FakeSub:
        entry = (subject, cb)
        self.subs.append(entry)
        return FakeSub(self, entry)

    async def publish_bytes(self, subject: str, payload: bytes, *, msg_id: str,
                            content_type: str = "application/json") -> int:
        assert len(payload) <= self.nc.max_payload, "a payload over the server's limit"
        assert content_type == "application/msgpack", "data-plane envelopes are MessagePack"
        msg = FakeMsg(subject, payload)
        self.stream.append(msg)
        for pattern, cb in list(self.subs):
            if matches(pattern, subject):
                await cb(msg)
        return len(self.stream)


class FakeObjects:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    async def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self.data[digest] = data
        return digest

    async def get(self, name: str, *, digest: str | None = None) -> bytes:
        data = self.data[name]
        if hashlib.sha256(data).hexdigest() != (digest or name):
            raise InvalidInput(f"object {name} does not match its digest")
        return data


@pytest.fixture
def bus(monkeypatch: pytest.MonkeyPatch) -> FakeBus:
    fake, store = FakeBus(), FakeObjects()

    def job_payloads(bus: Any, study: str, job: str) -> FakeObjects:
        assert (study, job) == ("demo", "j-1")
        return store

    async def replay(bus: Any, stream: str, decoder: Any, *,
                     filters: list[str]) -> AsyncIterator[FakeReplayed]:
        assert stream == "DATA_demo"
        for seq, msg in enumerate(list(fake.stream), 1):
            if any(matches(f, msg.subject) for f in filters):
                yield FakeReplayed(msg.data, seq)

    monkeypatch.setattr(dataplane, "job_payloads", job_payloads)
    monkeypatch.setattr(dataplane, "replay", replay)
    fake.store = store  # type: ignore[attr-defined]
    return fake


async def plane(bus: FakeBus, role: str, rank: int = 0) -> DataPlane:
    p = DataPlane(bus, study="demo", job="j-1", site=f"{role}-site",  # type: ignore[arg-type]
                  role=role, rank=rank)
    await p.start()
    return p


# -- behaviour --------------------------------------------------------------------------------


async def test_message_sent_before_the_receiver_listened_arrives_once_in_order(
        bus: FakeBus) -> None:
    client = await plane(bus, "client", 1)
    for i in range(3):
        await client.send("server", 0, "update", {"i": i})
    server = await plane(bus, "server")
    await client.send("server", 0, "update", {"i": 3})
    got = [(await server.receive("update", 1)).payload["i"] for _ in range(4)]
    assert got == [0, 1, 2, 3]
    assert await server.poll("update") is None


async def test_broadcast_reaches_others_not_the_sender(bus: FakeBus) -> None:
    server, a, b = await plane(bus, "server"), await plane(bus, "client", 0), \
        await plane(bus, "client", 1)
    await server.broadcast("task", {"round": 1})
    for p in (a, b):
        msg = await p.receive("task", 1)
        assert (msg.payload, msg.sender_role, msg.sender_site) == ({"round": 1}, "server",
                                                                   "server-site")
    assert await server.poll("task") is None


async def test_large_payload_goes_through_the_store_and_only_a_reference_is_sent(
        bus: FakeBus) -> None:
    server, client = await plane(bus, "server"), await plane(bus, "client")
    big = np.random.default_rng(0).normal(size=(300_000,))  # 2.4 MB
    await client.send("server", 0, "update", {"w": big})
    assert max(len(m.data) for m in bus.stream) < 1024
    msg = await server.receive("update", 1)
    assert msg.via_store
    np.testing.assert_array_equal(msg.payload["w"], big)
    small = await client.send("server", 0, "update", b"x" * 1000)
    assert small and not (await server.receive("update", 1)).via_store


async def test_tampered_object_is_refused(bus: FakeBus) -> None:
    server, client = await plane(bus, "server"), await plane(bus, "client")
    await client.send("server", 0, "blob", b"\x01" * (2 * 1024 * 1024))
    store: FakeObjects = bus.store  # type: ignore[attr-defined]
    for digest in store.data:
        store.data[digest] = b"\x02" * (2 * 1024 * 1024)
    with pytest.raises(InvalidInput, match="digest"):
        await server.receive("blob", 1)


async def test_request_reply_including_requests_sent_before_serving(bus: FakeBus) -> None:
    server, client = await plane(bus, "server"), await plane(bus, "client", 2)

    async def double(msg: Message) -> Any:
        if msg.payload["n"] < 0:
            raise ValueError("negative")
        return {"n": msg.payload["n"] * 2, "who": msg.sender_rank}

    # Sent before the server serves: the request waits in the queue, then is answered.
    pending = client.request("server", 0, "double", {"n": 21}, timeout=2)
    task = asyncio.ensure_future(pending)
    async with asyncio.timeout(5):  # until the request is on the bus, unanswered
        while not any(m.subject.endswith(".double") for m in bus.stream):
            await asyncio.sleep(0)
    assert not task.done()
    server.serve("double", double)
    assert (await task).payload == {"n": 42, "who": 2}
    with pytest.raises(RemoteError, match="ValueError: negative"):
        await client.request("server", 0, "double", {"n": -1}, timeout=2)
    with pytest.raises(Timeout, match="did not answer"):
        await client.request("server", 0, "nobody-serves", {}, timeout=0.1)
    await server.close()
    await client.close()


async def test_receive_is_bounded(bus: FakeBus) -> None:
    p = await plane(bus, "server")
    with pytest.raises(Timeout, match=r"no message on 'task' within 0\.05s"):
        await p.receive("task", 0.05)
