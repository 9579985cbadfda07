"""Launches whose end can never be reported: a launch request naming a study this site is
not in, a record of such a launch, a record whose report the broker refuses, a record that
does not decode. Each is dead-lettered (a whole copy on `cairn.deadletter.<store>`, so
`cairn deadletter redrive` can put it back) and reported once (`site.record-skipped` in
FEDERATION, one log line), and never holds the launcher up.
"""

from __future__ import annotations

import base64
import logging

from cairn import subjects
from cairn.bus import Bus
from cairn.errors import CairnError
from cairn.events import DeadLettered, RecordSkipped, now

log = logging.getLogger("cairn.launcher")

REPORT_TIMEOUT_S = 5.0
"""A report that cannot be stored in this time is logged; the caller carries on."""


async def dead_letter(bus: Bus, *, site: str, store: str, subject: str, key: str, seq: int,
                      data: bytes, headers: dict[str, str] | None, why: str) -> bool:
    """Dead-letter one stored message or record and report it; True once both are stored.

    The ids are derived from where the thing is stored, so a report sent again (a retry, a
    second start before the first was marked) is dropped by JetStream as a duplicate.
    """
    log.error("launcher@%s: dead-lettering %s (%s seq %d): %s", site, key, store, seq, why)
    tag = f"{store}.{key}.{seq}".replace("/", ".")
    letter = DeadLettered(
        id=f"unreportable.{tag}", at=now(), source=f"launcher@{site}", stream=store,
        subject=subject, consumer=f"launcher@{site}", stream_seq=seq, headers=headers or {},
        payload_b64=base64.b64encode(data[:1 << 20]).decode(), error=why[:2000])
    skipped = RecordSkipped(id=f"unreportable-report.{tag}", at=now(),
                            source=f"launcher@{site}", site=site, service="launcher",
                            store=store, key=key, seq=seq, error=why[:2000])
    try:
        await bus.ensure(subjects.DEADLETTER_STREAM)
        await bus.publish(letter, timeout=REPORT_TIMEOUT_S)
        await bus.publish(skipped, timeout=REPORT_TIMEOUT_S)
    except (CairnError, OSError) as exc:
        log.warning("could not dead-letter %s yet: %s", key, exc)
        return False
    return True
