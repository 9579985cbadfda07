"""Every identity kind x every row of the subject table, on a real server: publish,
subscribe, and each JetStream, KV and object-store call, allowed exactly where the table
says (tests/rights_oracle.py) and refused everywhere else."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from cairn.subjects.table import SUBJECTS, Holder, consumer_owner, js_consumer_create
from cairn.trust.credentials import API_NAME, Identity, Kind, issue
from cairn.trust.nkeyjwt import KeyKind, creds_file_text, new_seed, public_key
from cairn.trust.permissions import Membership, holder_of
from tests.integration.insiders import LEADS, STUDIES, insiders, kit, worker_creds
from tests.integration.security_helpers import Probe, connect_as
from tests.rights_oracle import (
    may_publish,
    may_subscribe,
    owns_consumer,
    owns_durable,
    reads,
    reads_any,
    writes_into,
)

__all__ = ["insiders"]

JOB, OTHER_JOB = "j-matrix", "j-other"
VALUES = {"study": ("alpha", "beta"), "site": ("site-a", "site-b", "hub"),
          "job": (JOB, OTHER_JOB), "role": ("client", "server"), "recipe": ("cpu",),
          "service": ("agent",), "stream": ("STUDY_alpha", "SITE_site-a", "DEADLETTER")}
STREAM_NAMES = ["STUDY_alpha", "STUDY_beta", "DATA_alpha", "FILES_alpha", "SITE_site-a",
                "SITE_site-b", "FEDERATION", "EVIDENCE", "DEADLETTER", "KV_sites",
                "KV_launches_site-a", "KV_nonces", "OBJ_artifacts_alpha", "OBJ_snapshots",
                "OBJ_evidence"]


def _membership() -> dict[str, Membership]:
    out = {s: Membership(sites=frozenset(sites), admins=frozenset({LEADS[s]}))
           for s, sites in STUDIES.items()}
    out["validation"] = Membership(sites=frozenset({"hub", "site-a", "site-b", "site-c"}),
                                   admins=frozenset({DEFAULT_ADMIN}))
    return out


def _concrete(pattern: str, verbs: tuple[str, ...]) -> list[str]:
    import re

    names = list(dict.fromkeys(re.findall(r"\{([a-z_]+)\}", pattern)))
    choices = [list(verbs[:2]) or ["x"] if n == "verb" else list(VALUES[n]) for n in names]
    out = []
    for combo in itertools.product(*choices):
        subject = pattern
        for name, value in zip(names, combo, strict=True):
            subject = subject.replace("{" + name + "}", value)
        out.append(subject.replace(">", "x.y"))
    return out


def _subjects() -> list[str]:
    found: list[str] = []
    for row in SUBJECTS:
        found += _concrete(row.pattern, row.verbs)
    return list(dict.fromkeys(found))


def _reader(fed: EmbeddedFederation, tmp: Path, *, data: bool) -> Path:
    assert fed.trust is not None
    root = (fed.trust.dir / "root" / "root.nk").read_text().strip()
    seed = new_seed(KeyKind.USER)
    identity = Identity(kind=Kind.READER, name=f"dash{'-data' if data else ''}@org-a",
                        study="alpha", data=data)
    path = tmp / f"{identity.name}.creds"
    path.write_text(creds_file_text(issue(identity, public_key(seed), root), seed))
    return path


def _identities(fed: EmbeddedFederation, tmp: Path) -> dict[str, tuple[Identity, Path]]:
    def of(name: str) -> Identity:
        from cairn.trust.credentials import verify_credential
        from cairn.trust.nkeyjwt import read_creds

        jwt, _ = read_creds(kit(fed, name).read_text())
        assert fed.trust is not None
        roots = frozenset((fed.trust.authority / "roots.txt").read_text().split())
        return verify_credential(jwt, roots).identity

    worker = worker_creds(fed, tmp, study="alpha", job=JOB, site="site-a")
    out = {name: (of(name), kit(fed, name)) for name in
           ("hub", "site-a", "site-b", DEFAULT_ADMIN, "alice@org-a", "bob@org-b", API_NAME)}
    out["worker"] = (Identity(kind=Kind.WORKER, name=f"{JOB}/site-a/client/0/0",
                              site="site-a", study="alpha", job=JOB, role="client"), worker)
    out["reader"] = (Identity(kind=Kind.READER, name="dash@org-a", study="alpha"),
                     _reader(fed, tmp, data=False))
    out["data-reader"] = (Identity(kind=Kind.READER, name="dash-data@org-a", study="alpha",
                                   data=True), _reader(fed, tmp, data=True))
    return out


FOREIGN = ("coordinator", "coordinator-fed", "signer", "launcher", "agent-site-a",
           "agent-site-b", "w~someone_0", "site-b_0", "a~someone_0")
JOB_FILTERS = {"STUDY_alpha": "cairn.study.alpha.job.{job}.>",
               "DATA_alpha": "cairn.data.alpha.{job}.>",
               "FILES_alpha": "cairn.files.alpha.{job}.>"}


def _js_calls(holder: Holder) -> list[tuple[str, bool]]:
    """(API subject, whether the table allows it) for one holder, on every stream."""
    calls: list[tuple[str, bool]] = []
    mine = f"{holder.owner}_0"
    for stream in STREAM_NAMES:
        whole = reads(holder, stream)
        calls += [(f"$JS.API.STREAM.INFO.{stream}",
                   reads_any(holder, stream) or writes_into(holder, stream)),
                  (js_consumer_create(stream, mine), whole),
                  (f"$JS.API.STREAM.MSG.GET.{stream}", whole),
                  (f"$JS.API.DIRECT.GET.{stream}", whole),
                  # The unnamed create's body may name any consumer: the hub's alone.
                  (f"$JS.API.CONSUMER.CREATE.{stream}", holder.kind == "hub")]
        if stream in JOB_FILTERS:
            for job in (JOB, OTHER_JOB):
                inner = JOB_FILTERS[stream].replace("{job}", job)
                calls.append((js_consumer_create(stream, mine, inner),
                              reads(holder, stream, inner)))
        if holder.kind == "hub":
            continue  # the hub owns the federation's consumers; deleting one is no probe
        for name in (mine, *FOREIGN):
            owned = owns_consumer(holder, stream, name)
            calls += [(f"$JS.API.CONSUMER.{verb}.{stream}.{name}", owned)
                      for verb in ("MSG.NEXT", "DELETE", "INFO")]
            if name != mine:  # creating another's name would update that consumer
                calls.append((js_consumer_create(stream, name), owned and (
                    reads(holder, stream) or owns_durable(holder, stream, name))))
            calls.append((f"$JS.ACK.{stream}.{name}.1.1.1.1.1",
                          owns_durable(holder, stream, name)))
    return calls


async def _verdicts(probe: Probe, subjects: list[str], *, publish: bool,
                    refusals: int) -> dict[str, bool]:
    """The server's verdict on each subject. A refusal is an event that can arrive after
    the answer to a flush, so this waits for as many as the table expects (then a little
    longer for any it does not)."""
    probe.errors.clear()
    for subject in subjects:
        if publish:
            await probe.nc.publish(subject, b"rights-matrix-probe",
                                   reply=probe.nc.new_inbox())
        else:
            sub = await probe.nc.subscribe(subject)
            await sub.unsubscribe()
    await probe.nc.flush(timeout=10)
    await probe.wait_errors(refusals, timeout=15)
    await probe.nc.flush(timeout=10)
    kind = "publish to" if publish else "subscription to"
    return {s: not probe.refused(f'{kind} "{s}"') for s in subjects}


@pytest.mark.timeout(300)
async def test_every_identity_against_every_row(insiders: EmbeddedFederation,
                                                tmp_path: Path) -> None:
    fed = insiders
    membership = _membership()
    subjects = _subjects()
    wrong: list[str] = []
    server: dict[str, dict[str, bool]] = {}
    for label, (identity, creds) in _identities(fed, tmp_path).items():
        holder = holder_of(identity, membership)
        readable = {s for s in STREAM_NAMES if reads(holder, s)}
        probe = await connect_as(fed, creds)
        try:
            table = {s: may_publish(holder, s, readable) for s in subjects}
            pub = await _verdicts(probe, subjects, publish=True,
                                  refusals=sum(not v for v in table.values()))
            wrong += [f"{label} publish {s}: server says {pub[s]}" for s in subjects
                      if pub[s] != table[s]]
            table = {s: may_subscribe(holder, s) for s in subjects}
            sub = await _verdicts(probe, subjects, publish=False,
                                  refusals=sum(not v for v in table.values()))
            wrong += [f"{label} subscribe {s}: server says {sub[s]}" for s in subjects
                      if sub[s] != table[s]]
            calls = dict(_js_calls(holder))
            js = await _verdicts(probe, list(calls), publish=True,
                                 refusals=sum(not v for v in calls.values()))
            wrong += [f"{label} {s}: server says {js[s]}, table {calls[s]}" for s in calls
                      if js[s] != calls[s]]
            server[label] = {**{f"pub {s}": v for s, v in pub.items()},
                             **{f"sub {s}": v for s, v in sub.items()},
                             **{f"js {s}": v for s, v in js.items()}}
            inbox = "_INBOX.USOMEONEELSE.x"
            await probe.nc.subscribe(inbox)
            if not await probe.wait_refused(f'subscription to "{inbox}"'):
                wrong.append(f"{label} may read another connection's inbox")
        finally:
            await probe.close()
    assert not wrong, f"{len(wrong)} verdicts differ from the table:\n" + "\n".join(wrong[:80])
    _the_api_reads_and_writes_nothing_of_its_own(server[API_NAME])


def _the_api_reads_and_writes_nothing_of_its_own(said: dict[str, bool]) -> None:
    """The HTTP API's identity, as the real server judged it: no event, no store write but
    code bundles (for a caller's signed submit), no request but the callers' submit and
    cancel; no data plane, job files, code or launches to read."""
    events = [s for row in SUBJECTS if row.kind in ("event", "store")
              for s in _concrete(row.pattern, row.verbs)]
    assert events and {s.split(".")[1] for s in events if said[f"pub {s}"]} == {
        "artifacts_alpha", "artifacts_beta"}
    asked = [s for row in SUBJECTS if row.kind == "request"
             for s in _concrete(row.pattern, row.verbs) if said[f"pub {s}"]]
    passed_on = {s for s in asked if s.startswith("cairn.api.study.")
                 and s.rsplit(".", 1)[1] in ("submit", "cancel")}
    assert set(asked) - passed_on == {"$JS.API.STREAM.NAMES"}, asked
    assert {f"cairn.api.study.{s}.{v}" for s in VALUES["study"]
            for v in ("submit", "cancel")} <= passed_on
    mine = f"{consumer_owner('api', API_NAME)}_0"
    for stream in ("DATA_alpha", "FILES_alpha", "OBJ_artifacts_alpha", "SITE_site-a",
                   "KV_launches_site-a", "KV_nonces", "DEADLETTER", "KV_sites"):
        assert not said[f"js {js_consumer_create(stream, mine)}"], stream
    for stream in ("STUDY_alpha", "STUDY_beta", "FEDERATION", "EVIDENCE", "OBJ_evidence"):
        assert said[f"js {js_consumer_create(stream, mine)}"], stream
    assert not [s for s in said if s.startswith("sub cairn.data.") and said[s]]
