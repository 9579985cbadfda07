"""Data-plane throughput of a large model: one put, then ten clients reading it at once,
through Cairn's payload store (`Objects.put_file` / `get_stream`, each chunk acked, digest
checked) vs raw nats-py object store `put` / `get` on the same private nats-server.

Both stream (a file in, bytes discarded as they arrive) over their own connections, one per
reader, in one process; the ratio is Cairn's bytes/s over raw's (target >= 0.8). The model is
`CAIRN_BENCH_MODEL_MIB` MiB (256 in `make bench`, to stay within a few minutes and a few GiB of
disk on two cores; the issue's 1 GiB with `CAIRN_BENCH_MODEL_MIB=1024`).

`run()` returns the section for `tools/bench.py`; progress goes to stderr.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats

from cairn import subjects
from cairn.bus import Bus, job_payloads
from cairn.runtime.natsserver import NatsServer

CLIENTS = 10
TARGETS = {"throughput_ratio": 0.8}
PHASE_TIMEOUT_S = 900.0


def progress(message: str) -> None:
    print(f"[bench scale payloads] {message}", file=sys.stderr, flush=True)


def write_model(path: Path, size: int) -> None:
    block = 1 << 20
    with path.open("wb") as fh:
        for i in range(size // block):
            fh.write(hashlib.sha256(i.to_bytes(8, "big")).digest() * (block // 32))


async def raw_round(url: str, model: Path, size: int) -> tuple[float, float]:
    writer = await nats.connect(url)
    readers = [await nats.connect(url) for _ in range(CLIENTS)]
    try:
        store = await writer.jetstream().create_object_store("bench_raw")
        started = time.perf_counter()
        with model.open("rb") as fh:
            await store.put("model", fh)
        put_s = time.perf_counter() - started

        class Sink:
            def __init__(self) -> None:
                self.n = 0

            def write(self, data: bytes) -> int:
                self.n += len(data)
                return len(data)

        async def read(nc: Any) -> int:
            sink = Sink()
            await (await nc.jetstream().object_store("bench_raw")).get("model", writeinto=sink)
            return sink.n

        started = time.perf_counter()
        got = await asyncio.gather(*(read(nc) for nc in readers))
        get_s = time.perf_counter() - started
        assert got == [size] * CLIENTS, got
        await writer.jetstream().delete_object_store("bench_raw")
        return put_s, get_s
    finally:
        for nc in (writer, *readers):
            await nc.close()


async def cairn_round(url: str, model: Path, size: int) -> tuple[float, float]:
    writer = await Bus.connect(url, name="bench-writer")
    readers = [await Bus.connect(url, name=f"bench-reader-{i}") for i in range(CLIENTS)]
    try:
        await writer.ensure(subjects.files_stream("bench"))
        started = time.perf_counter()
        digest = await job_payloads(writer, "bench", "j-bench").put_file(model)
        put_s = time.perf_counter() - started

        async def read(bus: Bus) -> int:
            n = 0
            async for chunk in job_payloads(bus, "bench", "j-bench").get_stream(digest):
                n += len(chunk)
            return n

        started = time.perf_counter()
        got = await asyncio.gather(*(read(bus) for bus in readers))
        get_s = time.perf_counter() - started
        assert got == [size] * CLIENTS, got
        await writer.js.purge_stream(subjects.files_stream("bench").name)
        return put_s, get_s
    finally:
        for bus in (writer, *readers):
            await bus.close()


async def measure() -> dict[str, Any]:
    size = int(os.environ.get("CAIRN_BENCH_MODEL_MIB", "256")) << 20
    with tempfile.TemporaryDirectory(prefix="bench-payloads-") as tmp:
        model = Path(tmp) / "model.bin"
        write_model(model, size)
        server = NatsServer(Path(tmp) / "nats").start()
        try:
            progress(f"raw nats-py object store: {size >> 20} MiB, 1 put + {CLIENTS} gets")
            raw_put, raw_get = await asyncio.wait_for(raw_round(server.url, model, size),
                                                      PHASE_TIMEOUT_S)
            progress(f"cairn payload store: {size >> 20} MiB, 1 put + {CLIENTS} gets")
            cairn_put, cairn_get = await asyncio.wait_for(
                cairn_round(server.url, model, size), PHASE_TIMEOUT_S)
        finally:
            server.stop()
    moved = size * (1 + CLIENTS)
    raw_bps, cairn_bps = moved / (raw_put + raw_get), moved / (cairn_put + cairn_get)
    return {
        "model_mib": size >> 20, "clients": CLIENTS,
        "raw": {"put_s": round(raw_put, 2), "get_all_s": round(raw_get, 2),
                "mib_per_s": round(raw_bps / 2**20, 1)},
        "cairn": {"put_s": round(cairn_put, 2), "get_all_s": round(cairn_get, 2),
                  "mib_per_s": round(cairn_bps / 2**20, 1)},
        "throughput_ratio": round(cairn_bps / raw_bps, 3),
        "targets": TARGETS,
    }


def run() -> dict[str, Any]:
    return asyncio.run(measure())


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
