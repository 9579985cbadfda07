"""Workers of a real job talking over the data plane: a 20 MiB payload crosses from a client
to the server through the object store, sent before the server listened; request/reply and
broadcast between workers; a user error ends the worker non-zero with its traceback logged.

The tests share one federation (this module's `federation`): each looks only at its own
job, which has ended before its test returns.
"""

from __future__ import annotations

import hashlib
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from cairn import subjects
from cairn.bus import job_payloads, replay
from cairn.client import Client
from cairn.runtime.embedded import EmbeddedFederation
from cairn.worker.dataplane import encode_payload
from tests.fixtures.federation import make_federation, started
from tests.integration.cp_helpers import write_job


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedFederation]:
    with started(make_federation(tmp_path_factory.mktemp("worker-payloads"))) as fed:
        yield fed

APP = '''\
import hashlib, os, time
import numpy as np
from cairn.worker import Worker, main

BLOB = 20 * 1024 * 1024

async def server(w: Worker) -> None:
    async def double(msg):
        return {"n": msg.payload["n"] * 2}
    w.serve("double", double)
    blob = await w.receive("blob", 60)
    digest = await w.receive("digest", 60)
    await w.broadcast("hello", {"from": w.site})
    done = [await w.receive("done", 60) for _ in range(2)]
    arr = blob.payload["arr"]
    await w.result({
        "ok": hashlib.sha256(arr.tobytes()).hexdigest() == digest.payload,
        "via_store": blob.via_store, "shape": list(arr.shape), "dtype": str(arr.dtype),
        "done": sorted(m.payload for m in done)})

async def client(w: Worker) -> None:
    if w.rank == 0:
        arr = np.random.default_rng(7).integers(0, 2**62, size=BLOB // 8, dtype=np.int64)
        await w.send("server", 0, "blob", {"arr": arr})
        await w.send("server", 0, "digest", hashlib.sha256(arr.tobytes()).hexdigest())
    answer = await w.request("server", 0, "double", {"n": 21 + w.rank}, timeout=60)
    hello = await w.receive("hello", 60)
    await w.send("server", 0, "done", f"{w.site}:{answer.payload['n']}:{hello.payload['from']}")

if os.environ["CAIRN_ROLE"] == "server":
    time.sleep(1.0)  # listen late: what the clients sent before must still arrive
main(server if os.environ["CAIRN_ROLE"] == "server" else client)
'''

ROLES = """\
    roles:
      server:
        entrypoint: python main.py
        resources: {cpus: 1, memory: 1Gi}
      client:
        entrypoint: python main.py
        resources: {cpus: 1, memory: 1Gi}
    """


async def test_20mib_payload_request_reply_and_broadcast_between_workers(
        federation: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    job_id = await client.submit(write_job(job_dir, name="payloads", script=APP, roles=ROLES))
    final = await client.wait(job_id, timeout=120)
    assert final.state == "completed", (final, [c.data async for c in client.logs(job_id)])
    [result] = [r.value for r in final.results if r.role == "server"]
    assert result == {"ok": True, "via_store": True, "shape": [20 * 1024 * 1024 // 8],
                      "dtype": "int64", "done": ["site-a:42:hub", "site-b:44:hub"]}

    assert federation.nats is not None
    bus = await federation.bus()
    try:
        sizes = [len(r.raw) async for r in replay(bus, subjects.data_stream("demo").name)]
        assert sizes and max(sizes) < 4096  # only references crossed the subjects
        # The payload is in the job's payloads under its digest, and reads back intact.
        store = job_payloads(bus, "demo", job_id)
        arr = np.random.default_rng(7).integers(0, 2**62, size=20 * 1024 * 1024 // 8,
                                                dtype=np.int64)
        _, body = encode_payload({"arr": arr})
        digest = hashlib.sha256(body).hexdigest()
        assert await store.get(digest, digest=digest) == body
    finally:
        await bus.close()


CRASH = textwrap.dedent('''\
    from cairn.worker import main

    async def run(w):
        await w.progress(1, 2, "about to fail")
        raise ValueError("bad input at row 17")

    main(run)
    ''')


async def test_user_error_ends_the_worker_non_zero_with_its_traceback(
        federation: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    job_id = await client.submit(write_job(job_dir, name="crash", script=CRASH))
    final = await client.wait(job_id, timeout=60)
    assert final.state == "failed" and final.cause == "crashed", final
    # The first crash fails the job, which cancels the other worker: it may still be on its
    # way out, be stopped, or have crashed on its own as the cancel came ("cancelled").
    crashed = [w for w in final.workers.values() if w.exit_code == 1]
    assert any(w.cause == "crashed" for w in crashed), final.workers
    assert all(w.progress == "about to fail" for w in crashed)
    log = b"".join([c.data async for c in client.logs(job_id)]).decode()
    assert "Traceback (most recent call last)" in log
    assert "ValueError: bad input at row 17" in log


ENDINGS = textwrap.dedent('''\
    import atexit, threading, time
    from cairn.worker import main

    LEFT_OPEN = open("left-open.txt", "w")  # module level, never closed: teardown's to flush
    LEFT_OPEN.write("flushed")

    def at_exit():
        with open("atexit.txt", "w") as fh:
            fh.write("ran")

    def late():
        time.sleep(0.3)
        with open("thread.txt", "w") as fh:
            fh.write("finished")

    atexit.register(at_exit)

    async def run(w):
        threading.Thread(target=late).start()  # not a daemon: the process waits for it

    main(run)
    ''')


async def test_a_finished_worker_still_does_what_interpreter_teardown_would(
        federation: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    # `main` skips the interpreter's teardown when the job returns; what a job relies on
    # from it must still happen: open files flushed, atexit handlers, non-daemon threads.
    job_id = await client.submit(write_job(job_dir, name="endings", script=ENDINGS))
    final = await client.wait(job_id, timeout=60)
    assert final.state == "completed", final
    dirs = [d for site in ("hub", "site-a", "site-b")
            for d in (federation.site_dir(site) / "work" / "workers").glob(f"{job_id}_*")]
    assert dirs
    for d in dirs:
        assert (d / "left-open.txt").read_text() == "flushed"
        assert (d / "atexit.txt").read_text() == "ran"
        assert (d / "thread.txt").read_text() == "finished"
