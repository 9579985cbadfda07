"""Record golden streams for tests/replay/: run real jobs on an embedded federation, then save
the study stream (one event per line, as stored) and the state folded from it.

    .venv/bin/python tools/record_replay.py [--out tests/replay/streams]

Re-record only on purpose: tests/replay/ fails CI when a reducer change would rewrite what a
recorded history means.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import textwrap
from pathlib import Path

import msgspec

from cairn import events as ev
from cairn.bus import replay
from cairn.client import Client
from cairn.runtime.context import Context
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from cairn.state import view

JOB = """\
name: {name}
code: ./app
roles:
  client:
    entrypoint: python main.py
    resources: {{cpus: 1, memory: {memory}}}
"""


async def record(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fed = EmbeddedFederation(dir=Path(tmp) / "fed", heartbeat_s=0.2)
        fed.start()
        try:
            await fed.wait_healthy(60)
            assert fed.nats is not None
            client = await Client.connect(Context(nats_url=fed.nats.url, study="demo",
                                                  actor=DEFAULT_ADMIN, **fed.client_options()))
            app = Path(tmp) / "job" / "app"
            app.mkdir(parents=True)
            (app / "main.py").write_text("import os\nprint(os.environ['CAIRN_SITE'])\n")
            for name, memory in (("ok", "256Mi"), ("too-big", "500Gi")):
                (app.parent / "job.yaml").write_text(textwrap.dedent(JOB.format(
                    name=name, memory=memory)))
                job = await client.submit(app.parent / "job.yaml")
                if name == "too-big":
                    await asyncio.sleep(1.0)
                    await client.cancel(job)
                await client.wait(job, timeout=60)
            await client.close()
            bus = await fed.bus()
            raw = [item.raw async for item in replay(bus, "STUDY_demo")]
            await bus.close()
        finally:
            fed.stop()
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo-jobs.jsonl").write_bytes(b"\n".join(raw) + b"\n")
    folded = view.fold(ev.STUDY_DECODER.decode(line) for line in raw)
    (out / "demo-jobs.expected.json").write_bytes(msgspec.json.format(
        msgspec.json.encode(folded), indent=2) + b"\n")
    print(f"recorded {len(raw)} events to {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("tests/replay/streams"))
    asyncio.run(record(parser.parse_args().out))


if __name__ == "__main__":
    main()
