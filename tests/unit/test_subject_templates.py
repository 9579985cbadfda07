"""A subject's template names no study, job, site, role or recipe: the same for every one of
them (span names, `messaging.destination.template`), and nothing a sender makes up."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cairn import events as ev
from cairn import subjects

NAME = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?\Z")


@given(study=NAME, job=NAME, site=NAME, role=NAME, recipe=NAME)
def test_every_builder_gives_one_template_whatever_the_names(
        study: str, job: str, site: str, role: str, recipe: str) -> None:
    cases = {
        subjects.job(study, job, "submitted"): "cairn.study.{study}.job.{job}.submitted",
        subjects.job_site(study, job, site, "accepted"):
            "cairn.study.{study}.job.{job}.site.{site}.accepted",
        subjects.job_worker(study, job, site, role, "progress"):
            "cairn.study.{study}.job.{job}.worker.{site}.{role}.progress",
        subjects.site_cmd(study, site, "deploy"): "cairn.study.{study}.site.{site}.cmd.deploy",
        subjects.study_admin(study, "created"): "cairn.study.{study}.admin.created",
        subjects.data(study, job, "round", "up"): "cairn.data.{study}.{job}.>",
        subjects.data(study, job): "cairn.data.{study}.{job}",
        subjects.site_launch(site, "requested"): "cairn.site.{site}.launch.requested",
        subjects.heartbeat(site): "cairn.site.{site}.heartbeat",
        subjects.api_study(study, "submit"): "cairn.api.study.{study}.submit",
        subjects.api_fed("study-list"): "cairn.api.fed.study-list",
        subjects.site_logs(site): "cairn.api.site.{site}.logs",
        subjects.validation(site, recipe, "started"):
            "cairn.validation.{site}.{recipe}.started",
        subjects.evidence(site, recipe): "cairn.evidence.{site}.{recipe}",
        subjects.health("agent", site): "cairn.health.{service}.{site}",
    }
    for subject, expected in cases.items():
        assert subjects.template(subject) == expected, subject


def test_every_event_subject_has_a_template_without_its_ids() -> None:
    for cls in ev.event_types():
        tag = ev.tag_of(cls)
        names = {"study": "s-1", "job": "j-1", "site": "site-x", "role": "r-1",
                 "recipe": "rc-1", "stream": "STUDY_s-1"}
        fields = {f: v for f, v in names.items() if f in cls.__struct_fields__}
        event = cls(**{**ev.stamp(), "source": "t@hub", **_required(cls), **fields})
        subject = subjects.subject_of(event)
        template = subjects.template(subject)
        assert template is not None, (tag, subject)
        assert not any(v in template for v in names.values()), (tag, template)
        assert template.endswith(tag.rsplit(".", 1)[-1]) or "{" in template.rsplit(".", 1)[-1]


def _required(cls: type) -> dict[str, object]:
    """Plain values for the other required fields of an event type (strings where unsure)."""
    import msgspec

    out: dict[str, object] = {}
    for field in msgspec.structs.fields(cls):
        if field.required and field.name not in ("id", "at", "source"):
            out[field.name] = "x"
    return out


def test_a_made_up_verb_or_foreign_subject_names_nothing() -> None:
    assert subjects.template("cairn.api.study.demo.a1b2c3d4") == "cairn.api.study.{study}.{verb}"
    assert subjects.template("cairn.study.demo.job.j-1.zzz") == \
        "cairn.study.{study}.job.{job}.{verb}"
    assert subjects.template("_INBOX.abcdef.1") is None
    assert subjects.template("$JS.API.STREAM.INFO.STUDY_demo") is None
    assert subjects.template("") is None
