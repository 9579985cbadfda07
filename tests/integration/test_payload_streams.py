"""Large payloads through a real nats-server, over a link that drops mid-transfer: a put
carries on without sending again what was stored, a get carries on from its last chunk, and
the SHA-256 of the whole is checked (a tampered object never reaches the reader)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from cairn import subjects
from cairn.bus import Bus, job_payloads
from cairn.bus._chunks import CHUNK, WINDOW
from cairn.errors import InvalidInput
from cairn.runtime.natsserver import NatsServer
from cairn.worker.dataplane import DataPlane
from cairn.worker.streamed import StoredPayload
from tests.fixtures.cutproxy import CutProxy

STUDY, JOB = "lung", "j-big"
SIZE = 24 * 1024 * 1024 + 12345  # not a whole number of chunks


@pytest.fixture
async def proxy(nats_server: NatsServer) -> AsyncIterator[CutProxy]:
    host, port = nats_server.url.removeprefix("nats://").rsplit(":", 1)
    relay = await CutProxy(host, int(port)).start()
    try:
        yield relay
    finally:
        await relay.stop()


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.bin"
    with path.open("wb") as fh:
        for _ in range(SIZE // (1 << 20)):
            fh.write(os.urandom(1 << 20))
        fh.write(os.urandom(SIZE % (1 << 20)))
    return path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


async def stored_chunks(bus: Bus, digest: str) -> int:
    """Messages stored under the object's chunk subject (every copy, not only the good)."""
    info = await bus.js.stream_info(subjects.files_stream(STUDY).name,
                                    subjects_filter=f"{subjects.files_prefix(STUDY, JOB)}.p."
                                                    f"{digest}.c.*")
    return sum((info.state.subjects or {}).values())


async def test_a_model_survives_dropped_connections_both_ways_and_is_checked(
        bus: Bus, proxy: CutProxy, model: Path, tmp_path: Path) -> None:
    await bus.ensure(subjects.files_stream(STUDY))
    flaky = await Bus.connect(proxy.url, name="flaky")
    try:
        store = job_payloads(flaky, STUDY, JOB)
        proxy.cut_at_upstream = SIZE // 2
        digest = await store.put_file(model)
        assert proxy.cuts == 1  # the link did drop mid-put
        assert digest == sha256_of(model)
        chunks = -(-SIZE // CHUNK)
        stored = await stored_chunks(bus, digest)
        # Carried on: at most one window sent again, not the whole model.
        assert chunks <= stored <= chunks + WINDOW, stored
        assert proxy.upstream_bytes < 1.25 * SIZE

        before = proxy.downstream_bytes
        proxy.cut_at_downstream = before + SIZE // 2
        out = await store.get_file(digest, tmp_path / "back.bin", digest=digest)
        assert proxy.cuts == 2  # dropped mid-get too
        assert sha256_of(out) == digest
        # Carried on from the last chunk read, not from the first.
        assert proxy.downstream_bytes - before < 1.25 * SIZE
    finally:
        await flaky.close()


async def test_an_object_that_does_not_match_its_digest_is_refused_and_not_written(
        bus: Bus, tmp_path: Path) -> None:
    await bus.ensure(subjects.files_stream(STUDY))
    store = job_payloads(bus, STUDY, JOB)
    digest = await store.put(os.urandom(3 * CHUNK + 5))
    info = await store.info(digest)
    assert info is not None and info["chunks"] == 4
    # A meta record whose digest is not the chunks' (as if a chunk had been swapped).
    forged = dict(info, digest="SHA-256=" + "A" * 43 + "=")
    await bus.js.publish(store.layout.meta(digest), json.dumps(forged).encode(),
                         headers={"Nats-Rollup": "sub"})
    with pytest.raises(InvalidInput, match="recorded digest"):
        await store.get_file(digest, tmp_path / "x.bin")
    assert not (tmp_path / "x.bin").exists() and not (tmp_path / "x.bin.partial").exists()


async def test_a_state_dict_sent_array_by_array_arrives_as_the_same_arrays(bus: Bus) -> None:
    await bus.ensure(subjects.files_stream(STUDY))
    planes = [DataPlane(bus, study=STUDY, job=JOB, site=site, role=role, rank=0)
              for site, role in (("hub", "server"), ("site-a", "client"))]
    for plane in planes:
        await plane.start()
    try:
        rng = np.random.default_rng(3)
        state = {"conv.weight": rng.standard_normal((64, 32, 3, 3), dtype=np.float32),
                 "fc.bias": rng.standard_normal(10), "steps": np.int64(7)}
        await planes[0].send_arrays("client", 0, "model", state)
        msg = await planes[1].receive("model", 30)
        assert msg.via_store and isinstance(msg.payload, StoredPayload)
        back = await msg.payload.arrays()
        assert list(back) == list(state)
        for name, value in state.items():
            np.testing.assert_array_equal(back[name], value)
        with pytest.raises(InvalidInput, match="not arrays"):
            await planes[0].send_file("client", 0, "file", lambda: [b"x" * 10])
            await (await planes[1].receive("file", 30)).payload.arrays()
    finally:
        for plane in planes:
            await plane.close()
