"""A failed live reload is visible, and cheap: a study_runtime.yaml that is not UTF-8, too
large or a YAML bomb is rejected with `site.config-rejected` and a warning, the site parent's
memory stays bounded, the last good policy stays in force and the site stays online."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import pytest

from cairn import subjects
from cairn.bus import replay
from cairn.client import Client
from cairn.events import FEDERATION_DECODER, SiteConfigLoaded, SiteConfigRejected
from cairn.runtime.embedded import EmbeddedFederation
from tests.integration.cp_helpers import write_job

BOMB = "format: 1\na: &a [" + ",".join(['"lol"'] * 9) + "]\n" + "".join(
    f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True)
)


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident set (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


async def site_facts(fed: EmbeddedFederation, site: str) -> list[object]:
    assert fed.nats is not None
    bus = await fed.bus()
    try:
        return [r.event async for r in replay(bus, subjects.FEDERATION_STREAM.name,
                                              FEDERATION_DECODER,
                                              filters=[f"{subjects.ROOT}.site.{site}.>"])
                if r.event is not None]
    finally:
        await bus.close()


async def wait_rejected(fed: EmbeddedFederation, site: str, before: int,
                        timeout: float = 60) -> SiteConfigRejected:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rejected = [e for e in await site_facts(fed, site) if isinstance(e, SiteConfigRejected)]
        if len(rejected) > before:
            return rejected[-1]
        await asyncio.sleep(0.2)
    raise AssertionError(f"the agent of {site} published no site.config-rejected")


async def health(fed: EmbeddedFederation, service: str, site: str) -> dict[str, object]:
    assert fed.nats is not None
    bus = await fed.bus()
    try:
        reply = await bus.request(subjects.health(service, site), b"", timeout=5)
        return dict(msgspec.json.decode(reply))
    finally:
        await bus.close()


@pytest.mark.parametrize(("content", "problem"), [
    (b"format: 1\nstudies: {}\n# caf\xe9\n", "not UTF-8: byte 0xe9 at byte offset"),
    (BOMB.encode(), "CAIRN_YAML_MAX_NODES"),
    (b"format: 1\n# " + b"x" * (5 * 1024 * 1024) + b"\n", "larger than the limit of"),
])
async def test_hostile_runtime_file_is_rejected_visibly_and_the_site_stays_online(
        federation: EmbeddedFederation, client: Client, job_dir: Path,
        content: bytes, problem: str) -> None:
    site = "site-a"
    parent = federation.process("site-site-a").proc.pid
    runtime = federation.site_dir(site) / "local" / "study_runtime.yaml"
    good = runtime.read_bytes()
    before = len([e for e in await site_facts(federation, site)
                  if isinstance(e, SiteConfigRejected)])
    peak_before = peak_rss_kib(parent)

    runtime.write_bytes(content)
    rejected = await wait_rejected(federation, site, before)
    assert rejected.file.endswith("study_runtime.yaml")
    assert problem in rejected.error, rejected.error
    # Bounded: refusing the file cost the parent next to nothing (expanding the bomb is GBs).
    assert peak_rss_kib(parent) - peak_before < 64 * 1024
    log = federation.process("site-site-a").log.read_text()
    assert "keeping the last good study runtime" in log

    # Still online, on the last good policy: its agent answers, and a job runs there.
    state = await health(federation, "agent", site)
    assert state["ready"] is True and problem in str(state["runtime_error"])
    job_id = await client.submit(write_job(job_dir))
    final = await client.wait(job_id, timeout=120)
    assert final.state == "completed", (final.cause, final.message)
    assert any(w.site == site for w in final.workers.values())

    # And a good file again is loaded again: a `site.config-loaded` after the rejection (other
    # site facts, a snapshot or a drift, may come after it).
    async def loads_since_rejection() -> int:
        facts = await site_facts(federation, site)
        last = max(i for i, e in enumerate(facts) if isinstance(e, SiteConfigRejected))
        return sum(1 for e in facts[last:] if isinstance(e, SiteConfigLoaded))

    runtime.write_bytes(good + b"\n")
    deadline = time.monotonic() + 60
    while not await loads_since_rejection():
        assert time.monotonic() < deadline, "the good file was not loaded again"
        await asyncio.sleep(0.2)
