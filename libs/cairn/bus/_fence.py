"""Server-side fencing: JetStream itself refuses the events of a leased service whose term
is over.

The lease (`_lease.py`) keeps a holder from *deciding* once its validity ran out, but an
event decided while it was valid may still reach the server later: nats-py holds what is
published during a reconnect and sends it once connected again, and a publish that timed
out may be retried. A standby that took over meanwhile must never see such an event land
after it replayed the stream.

So each stream a leased service writes has a *term subject* (the coordinator's:
`cairn.study.<study>.admin.term` and `cairn.fed.term`). A holder that takes over writes its
term there first, as a compare-and-set against the last term it read (JetStream's
`Nats-Expected-Last-Subject-Sequence` on that subject), and only a holder whose term is the
newest may; it does so before it folds the stream. Every event it publishes afterwards carries
`Nats-Expected-Last-Subject-Sequence: <its term's sequence>` and
`Nats-Expected-Last-Subject-Sequence-Subject: <the term subject>`: JetStream stores it only
while that term is still the last one written there. Once a later holder has written its
own, every publish of the earlier one is refused (error 10071), whatever its clock says, and
the earlier holder learns that it lost (`Fenced`).

A stream where no term was ever written (a study the holder is creating) takes the holder's
first event with the expectation that there is none (sequence 0), then the term: a stream's
first event stays its own (`study.created`, `federation.seeded`).

The expectations are checked before JetStream's duplicate window: a retried publish whose
first copy was stored is still answered as a duplicate while the term stands, and refused
once it does not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from nats.js.errors import APIError, NotFoundError

from cairn.bus._connection import Bus
from cairn.bus._lease import LEASE_HEADER, Lease, LeaseLost
from cairn.events import Event, tag_of
from cairn.subjects import subject_of

log = logging.getLogger("cairn.bus.fence")

EXPECTED_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
WRONG_LAST_SEQUENCE = 10071
"""JetStream's error when the expected last sequence of a subject is not the last."""


class Fenced(LeaseLost):
    """A later holder's term stands on a stream this holder writes: the server refused its
    event (or its term), and it must stop acting."""


def term_of(headers: dict[str, str] | None, service: str) -> int:
    """The term in a stored event's `Cairn-Lease` header (`<service>:<term>`); 0 when it has
    none of `service`'s."""
    kind, _, term = (headers or {}).get(LEASE_HEADER, "").partition(":")
    return int(term) if kind == service and term.isdigit() else 0


def refused(exc: BaseException) -> bool:
    """Whether JetStream refused a publish because a subject's last sequence moved on."""
    return isinstance(exc, APIError) and exc.err_code == WRONG_LAST_SEQUENCE


class Fence:
    """One holder's terms on the streams it writes.

    Args:
        bus: The holder's connection.
        lease: The lease it holds (its `term`, its headers, and `lose` when fenced out).
        marker: The term event to write on a stream (by its name: a `study.term` for a
            study's): its subject is that stream's term subject.
    """

    def __init__(self, bus: Bus, lease: Lease, marker: Callable[[str], Event]) -> None:
        self.bus = bus
        self.lease = lease
        self.marker = marker
        self._terms: dict[str, int] = {}
        """Term subject -> the sequence of this holder's term there."""
        self._locks: dict[str, asyncio.Lock] = {}

    async def begin(self, stream: str, written: str) -> int | None:
        """Write this holder's term on `stream` unless neither a term nor anything on
        `written` (the subjects this service writes there) was ever stored: then its first
        event will be the stream's first. Called for every stream at take-over, before
        folding it; the term's sequence, or None.

        Raises:
            Fenced: a later term stands there.
        """
        marker = self.marker(stream)
        subject = subject_of(marker)
        if subject in self._terms:
            return self._terms[subject]
        if await self._last(stream, subject) is None and \
                await self._last(stream, written) is None:
            return None
        return await self._claim(stream, marker, subject)

    async def publish(self, event: Event, stream: str, *,
                      headers: dict[str, str] | None = None) -> int:
        """Publish `event` (of this holder's) into `stream`, stored only while this holder's
        term is the last one there; its stream sequence.

        Raises:
            Fenced: a later holder's term stands there: nothing was stored.
            LeaseLost: the lease is not valid now (nothing was sent).
        """
        marker = self.marker(stream)
        subject = subject_of(marker)
        seq = self._terms.get(subject)
        first = False
        if seq is None:
            if await self._last(stream, subject) is None:
                seq, first = 0, True  # no term here yet: stored only while none is
            else:
                seq = await self._claim(stream, marker, subject)
        fenced = {**(headers or {}), **self.lease.headers(),
                  EXPECTED_SEQ: str(seq), EXPECTED_SUBJECT: subject}
        try:
            stored = await self.bus.publish(event, headers=fenced)
        except APIError as exc:
            if refused(exc):
                raise self._out(subject, f"its {tag_of(event)} was refused: a later term "
                                         f"stands on {subject}") from None
            raise
        if first:
            await self._claim(stream, marker, subject)
        return stored

    async def _claim(self, stream: str, marker: Event, subject: str) -> int:
        lock = self._locks.setdefault(subject, asyncio.Lock())
        async with lock:
            while subject not in self._terms:
                last = await self._last(stream, subject)
                if last is not None:
                    last_seq, last_term = last
                    if last_term > self.lease.term:
                        raise self._out(subject, f"term {last_term} stands on {subject}")
                    if last_term == self.lease.term:  # ours, its answer lost on the way
                        self._terms[subject] = last_seq
                        break
                headers = {**self.lease.headers(),
                           EXPECTED_SEQ: str(0 if last is None else last[0])}
                try:
                    self._terms[subject] = await self.bus.publish(marker, headers=headers)
                except APIError as exc:
                    if not refused(exc):
                        raise
                    continue  # another term was written meanwhile: read it
                log.info("%s: term %d begins on %s", self.lease.service, self.lease.term,
                         subject)
            return self._terms[subject]

    async def _last(self, stream: str, subject: str) -> tuple[int, int] | None:
        """The last message on `subject` in `stream`: (its sequence, its term)."""
        try:
            msg = await self.bus._retry(
                lambda: self.bus.js.get_last_msg(stream, subject, direct=True),
                what=f"reading the last {subject} of {stream}")
        except NotFoundError:
            return None
        return int(msg.seq or 0), term_of(msg.headers, self.lease.service)

    def _out(self, subject: str, why: str) -> Fenced:
        self._terms.pop(subject, None)
        self.lease.lose(f"fenced out: {why}")
        return Fenced(f"the {self.lease.service} of term {self.lease.term} is fenced out: "
                      f"{why}")

