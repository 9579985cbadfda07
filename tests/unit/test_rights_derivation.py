"""The permissions handed to the broker say what the subject table says, row by row: the NATS
patterns `cairn.trust.permissions` derives, matched as NATS matches them, agree with the
table's own reading of each concrete subject (tests/rights_oracle.py). The real server is
held to the same in tests/integration/test_rights_matrix.py."""

from __future__ import annotations

import pytest

from cairn.trust.credentials import Identity, Kind
from cairn.trust.permissions import holder_of, permissions
from tests.integration.test_rights_matrix import (
    STREAM_NAMES,
    _js_calls,
    _membership,
    _subjects,
)
from tests.rights_oracle import may_publish, may_subscribe, reads
from tests.subject_match import may

IDENTITIES = {
    "hub": Identity(kind=Kind.HUB, name="hub", site="hub"),
    "site-a": Identity(kind=Kind.SITE, name="site-a", site="site-a"),
    "site-b": Identity(kind=Kind.SITE, name="site-b", site="site-b"),
    "project-admin": Identity(kind=Kind.ADMIN, name="admin@coord", admin_role="project_admin"),
    "alice": Identity(kind=Kind.ADMIN, name="alice@org-a", admin_role="lead"),
    "worker": Identity(kind=Kind.WORKER, name="j-matrix/site-a/client/0/0", site="site-a",
                       study="alpha", job="j-matrix", role="client"),
    "reader": Identity(kind=Kind.READER, name="dash@org-a", study="alpha"),
    "data-reader": Identity(kind=Kind.READER, name="dd@org-a", study="alpha", data=True),
    "api": Identity(kind=Kind.API, name="api"),
}


@pytest.mark.parametrize("label", sorted(IDENTITIES))
def test_derived_permissions_agree_with_the_table(label: str) -> None:
    identity = IDENTITIES[label]
    membership = _membership()
    holder = holder_of(identity, membership)
    perms = permissions(identity, "UKEY", membership)
    readable = {s for s in STREAM_NAMES if reads(holder, s)}
    wrong = []
    for subject in _subjects():
        if may(perms.pub_allow, subject) != may_publish(holder, subject, readable):
            wrong.append(f"publish {subject}: derived {may(perms.pub_allow, subject)}")
        if may(perms.sub_allow, subject) != may_subscribe(holder, subject):
            wrong.append(f"subscribe {subject}: derived {may(perms.sub_allow, subject)}")
    for subject, expected in _js_calls(holder):
        if may(perms.pub_allow, subject) != expected:
            wrong.append(f"{subject}: derived {not expected}, table {expected}")
    assert not wrong, "\n".join(wrong[:60])
