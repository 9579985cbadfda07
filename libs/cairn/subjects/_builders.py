"""Every subject, stream and bucket name, built by functions from the subject table.

Each token that comes from a user (study, site, job, role, recipe, service) passes the name
rule in `cairn.names` here, so a study called `s1.>` can never become a wildcard. The
patterns themselves are the table's (`cairn.subjects.table`): nothing here spells one.
"""

from __future__ import annotations

from typing import NamedTuple

from cairn.errors import InvalidName
from cairn.names import check_name
from cairn.subjects.table import ROOT, fill_with, subject_row

_VERB_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


def _verb(verb: str) -> str:
    if not verb or not set(verb) <= _VERB_CHARS:
        raise InvalidName(f"{verb!r} is not a valid subject verb", field="verb")
    return verb


def _subject(key: str, **tokens: str) -> str:
    return fill_with(subject_row(key).pattern, tokens)


def _filter(key: str, **tokens: str) -> str:
    return fill_with(subject_row(key).pattern, tokens, wildcards=True)


# -- study stream ---------------------------------------------------------------------------

def study_admin(study: str, verb: str) -> str:
    return _subject("study.admin", study=study, verb=verb)


def job(study: str, job_id: str, verb: str) -> str:
    return _subject("study.job", study=study, job=job_id, verb=verb)


def job_site(study: str, job_id: str, site: str, verb: str) -> str:
    return _subject("study.job.site", study=study, job=job_id, site=site, verb=verb)


def job_worker(study: str, job_id: str, site: str, role: str, verb: str) -> str:
    return _subject("study.job.worker", study=study, job=job_id, site=site, role=role,
                    verb=verb)


def site_cmd(study: str, site: str, verb: str) -> str:
    return _subject("study.site.cmd", study=study, site=site, verb=verb)


def study_all(study: str) -> str:
    """Every stored subject of one study."""
    return f"{ROOT}.study.{check_name(study, 'study')}.>"


def study_jobs(study: str) -> str:
    return f"{ROOT}.study.{check_name(study, 'study')}.job.>"


def job_all(study: str, job_id: str) -> str:
    return f"{ROOT}.study.{check_name(study, 'study')}.job.{check_name(job_id, 'job')}.>"


def study_admin_all(study: str | None = None) -> str:
    """One study's admin events, or every study's (`None`)."""
    return _filter("study.admin", study=study or "*")


def site_job_events(study: str, site: str, verb: str = "*") -> str:
    """One site's job events (accepted, rejected, launching, running, exited) in a study."""
    token = "*" if verb == "*" else _verb(verb)
    return _filter("study.job.site", study=study, site=site, verb=token)


def site_cmds(study: str, site: str) -> str:
    return f"{ROOT}.study.{check_name(study, 'study')}.site.{check_name(site, 'site')}.cmd.>"


def site_cmds_all_studies(site: str) -> str:
    """A site agent's commands across every study it belongs to."""
    return f"{ROOT}.study.*.site.{check_name(site, 'site')}.cmd.>"


# -- data plane and job files -----------------------------------------------------------------

def data(study: str, job_id: str, *tokens: str) -> str:
    """A job's data-plane subject: `cairn.data.<study>.<job>.<tokens...>`."""
    rest = ".".join(_data_token(t) for t in tokens)
    base = f"{ROOT}.data.{check_name(study, 'study')}.{check_name(job_id, 'job')}"
    return f"{base}.{rest}" if rest else base


def data_all(study: str, job_id: str | None = None) -> str:
    if job_id is None:
        return f"{ROOT}.data.{check_name(study, 'study')}.>"
    return _subject("data", study=study, job=job_id)


def _data_token(token: str) -> str:
    if token in ("*", ">"):
        return token
    return check_name(token, "data subject token")


def files_all(study: str, job_id: str | None = None) -> str:
    """A job's files (results, large payloads), or every job's of a study."""
    if job_id is None:
        return f"{ROOT}.files.{check_name(study, 'study')}.>"
    return _subject("files", study=study, job=job_id)


def files_prefix(study: str, job_id: str) -> str:
    """Where one job's files live: `<prefix>.<digest>.m` and `<prefix>.<digest>.c.<id>`."""
    return files_all(study, job_id)[:-2]


# -- site, federation, health, dead letters ---------------------------------------------------

def site_launch(site: str, verb: str) -> str:
    return _subject("site.launch", site=site, verb=verb)


def site_launch_all(site: str) -> str:
    return f"{ROOT}.site.{check_name(site, 'site')}.launch.>"


def heartbeat(site: str) -> str:
    return _subject("site.heartbeat", site=site)


def heartbeat_all() -> str:
    return _filter("site.heartbeat")


def site_event(site: str, verb: str) -> str:
    """Site-level facts kept in FEDERATION: snapshot, drift, config."""
    return f"{ROOT}.site.{check_name(site, 'site')}.{_verb(verb)}"


def site_event_any(verb: str) -> str:
    """One kind of site fact (e.g. `snapshot`) of every site."""
    return f"{ROOT}.site.*.{_verb(verb)}"


def site_snapshot_request(site: str) -> str:
    """Request/reply: ask a site's snapshotter for a fresh snapshot (not stored)."""
    return _subject("api.site.snapshot", site=site)


def site_logs(site: str) -> str:
    """Request/reply: read a worker's captured log from the site's launcher (not stored)."""
    return _subject("api.site.logs", site=site)


def site_studies(site: str) -> str:
    """Request/reply: the studies a site belongs to, as the authority says (secure only)."""
    return _subject("api.site.studies", site=site)


def site_studies_all() -> str:
    return _filter("api.site.studies")


def fed(verb: str) -> str:
    return _subject("fed", verb=verb)


def validation(site: str, recipe: str, verb: str) -> str:
    return _subject("validation", site=site, recipe=recipe, verb=verb)


def validation_all(site: str, recipe: str) -> str:
    """Every validation event of one site and recipe (started, phase, completed)."""
    return _filter("validation", site=site, recipe=recipe)


def validation_any() -> str:
    """Every validation event of every site and recipe."""
    return f"{ROOT}.validation.>"


def api_validation(verb: str) -> str:
    """Request/reply with the validator (`run`): not stored; progress comes as events."""
    return _subject("api.validation", verb=verb)


def evidence(site: str, recipe: str) -> str:
    return _subject("evidence", site=site, recipe=recipe)


def evidence_filter(site: str | None = None, recipe: str | None = None) -> str:
    """Evidence of one site and recipe, or of every site (`None`) or recipe (`None`)."""
    return _filter("evidence", site=site or "*", recipe=recipe or "*")


def health(service: str, site: str) -> str:
    return _subject("health", service=service, site=site)


def health_all() -> str:
    return f"{ROOT}.health.>"


def deadletter(stream: str) -> str:
    return _subject("deadletter", stream=stream)


def api_fed(verb: str) -> str:
    return _subject("api.fed", verb=verb)


def api_fed_all() -> str:
    return _filter("api.fed")


def api_study_all() -> str:
    """Every study verb of every study (the coordinator answers all of them)."""
    return _filter("api.study")


def api_study(study: str, verb: str) -> str:
    return _subject("api.study", study=study, verb=verb)


class ApiAddress(NamedTuple):
    """Where a request on `cairn.api.*` was sent: its scope, verb and study or site token."""

    scope: str
    verb: str
    study: str | None = None
    site: str | None = None


def parse_api(subject: str) -> ApiAddress:
    """Parse `cairn.api.fed.<verb>`, `cairn.api.study.<study>.<verb>`,
    `cairn.api.site.<site>.<verb>` or `cairn.api.validation.<verb>`.

    Raises:
        InvalidName: not a request subject, or a token breaks the name rule.
    """
    tokens = subject.split(".")
    if len(tokens) >= 4 and tokens[:2] == [ROOT, "api"]:
        scope, rest = tokens[2], tokens[3:]
        if scope in ("fed", "validation") and len(rest) == 1:
            return ApiAddress(scope, _verb(rest[0]))
        if scope == "study" and len(rest) == 2:
            return ApiAddress(scope, _verb(rest[1]), study=check_name(rest[0], "study"))
        if scope == "site" and len(rest) == 2:
            return ApiAddress(scope, _verb(rest[1]), site=check_name(rest[0], "site"))
    raise InvalidName(f"{subject!r} is not a request subject", field="subject")
