"""The subject table: one row per event type, builders and the owner check derived from it."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from cairn import subjects
from cairn.errors import InvalidName
from cairn.events import ANY_DECODER, StudySiteAdded, WorkerExited, event_types
from cairn.subjects.table import SUBJECTS, rows_of_event

AT = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("event_type", event_types(), ids=lambda t: t.__name__)
def test_every_event_type_has_exactly_one_row(event_type: type) -> None:
    assert len(rows_of_event(event_type)) == 1


def test_rows_name_distinct_keys_and_their_verbs_are_their_events() -> None:
    keys = [r.key for r in SUBJECTS]
    assert len(keys) == len(set(keys))
    for row in SUBJECTS:
        tags = {str(e.__struct_config__.tag).rsplit(".", 1)[1] for e in row.events}
        assert set(row.verbs) == tags or not row.events or "{verb}" not in row.pattern


def test_a_token_that_breaks_the_name_rule_is_refused() -> None:
    for bad in ("s1.>", "*", "S1", "a b", ""):
        with pytest.raises(InvalidName):
            subjects.study_admin(bad, "created")
    with pytest.raises(InvalidName):
        subjects.job_site("s1", "j-1", "site-a", "exited.>")


def _exit(**change: object) -> WorkerExited:
    base: dict[str, object] = {"type": "worker.exited", "id": "e1", "at": AT,
                               "source": "launcher@site-a", "study": "alpha", "job": "j-1",
                               "site": "site-a", "role": "client",
                               "launch_id": "j-1/site-a/client/0/0"}
    return msgspec.convert({**base, **change}, WorkerExited)


def test_an_event_on_its_owners_subject_is_accepted() -> None:
    event = _exit()
    assert subjects.misplaced(event, "cairn.study.alpha.job.j-1.site.site-a.exited") == ""


@pytest.mark.parametrize("event,subject,why", [
    # A site of study beta adds itself to study alpha, on its own permitted subject.
    (StudySiteAdded(id="f", at=AT, source="coordinator@hub", study="alpha", site="site-b"),
     "cairn.study.beta.job.j-x.site.site-b.exited", "belongs on cairn.study.alpha.admin"),
    # A site revokes the hub through a worker.exited naming it.
    (_exit(launch_id="hub"), "cairn.study.alpha.job.j-1.site.site-a.exited", "launch"),
    # A site reports another site's worker.
    (_exit(site="site-b", launch_id="j-1/site-b/client/0/0"),
     "cairn.study.alpha.job.j-1.site.site-a.exited", "belongs on"),
    # Another study's job, on this study's subject.
    (_exit(study="beta"), "cairn.study.alpha.job.j-1.site.site-a.exited", "belongs on"),
    # A coordinator's job.completed stored on a site's subject.
    (ANY_DECODER.decode(b'{"type":"job.completed","id":"c","at":"2026-01-01T00:00:00Z",'
                        b'"source":"coordinator@hub","study":"alpha","job":"j-1"}'),
     "cairn.study.alpha.job.j-1.site.site-c.exited", "belongs on"),
])
def test_a_forgery_is_named_for_what_it_is(event: object, subject: str, why: str) -> None:
    reason = subjects.misplaced(event, subject)
    assert reason and why in reason, reason
