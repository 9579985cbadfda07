"""The job spec (`job.yaml`, the data scientist's file): model and loader.

A job names its code, its roles and what each role needs; never where data lives, which
secrets it gets or how a site runs it (see `_forbidden`). The parsed `JobSpec` is plain and
msgspec-encodable: the coordinator puts it in `job.submitted` as is.

Roles: a role named `server` runs on the federation's hub site (federation.yaml `hub`) by
default (`placement: hub`); every other role runs at the study's sites (`placement: sites`),
one worker per chosen site. `placement` may be written to override the default.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Any, Literal

import msgspec

from cairn.errors import InvalidInput
from cairn.events.job import Resources
from cairn.events.workflow import WorkflowRequest
from cairn.spec._forbidden import check_forbidden
from cairn.spec._located import Located
from cairn.spec.duration import parse_duration
from cairn.spec.images import image_problem
from cairn.spec.quantity import parse_cpus, parse_gpus, parse_memory
from cairn.spec.workflow import parse_workflow
from cairn.yamlfile import PathKey, YamlDocument, convert, parse, read_text

Placement = Literal["hub", "sites"]
HUB_ROLE = "server"
DEFAULT_TIMEOUT_S = 3600
DEFAULT_QUEUE_TIMEOUT_S = 600
DEFAULT_END_GRACE_S = 30
_Scalar = int | float | str
# Upper bounds (docs/limits.md), so a slip is an error at load rather than a job that waits
# forever for sites or retries without end.
MAX_RETRIES = 100
MAX_SITES = 10_000
MAX_NODES = 4096
"""The most nodes one worker may span (docs/limits.md)."""


# --- the file as written (strict: an unknown key is an error) -------------------------------


class _RawResources(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    gpus: _Scalar = 0
    cpus: _Scalar = 1
    memory: _Scalar = "512Mi"
    nodes: int = 1


class _RawRole(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    entrypoint: str
    resources: _RawResources = msgspec.field(default_factory=_RawResources)
    placement: Placement | None = None
    sites: str | list[str] = "all"
    min_sites: int | None = None
    api: Literal["cairn", "flare"] = "cairn"


class _RawRequires(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    recipe: str
    max_age: int | str | None = None
    signers: list[str] = []


class _RawJob(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    study: str | None = None
    code: str
    roles: dict[str, _RawRole]
    image: str | None = None
    params: dict[str, Any] = {}
    timeout: int | str = DEFAULT_TIMEOUT_S
    retries: int = 0
    queue_timeout: int | str = DEFAULT_QUEUE_TIMEOUT_S
    end_grace: int | str = DEFAULT_END_GRACE_S
    requires: _RawRequires | None = None
    workflow: dict[str, Any] | None = None


# --- the parsed, canonical spec (lenient, like every event payload) -------------------------


class Role(msgspec.Struct, frozen=True, kw_only=True):
    """One role of a job.

    Attributes:
        entrypoint: The command the worker runs, split with `shlex` (see `argv`); for a
            role written with `api: flare`, the trainer's command under
            `python -m cairn.flare.run` (FLARE's Client API, `cairn.flare`).
        resources: What one worker of this role needs (on each node, for several nodes).
        nodes: Nodes one worker spans (a multi-node batch job: a rank per node).
        placement: `hub` (the federation's hub site) or `sites` (one worker per chosen site).
        sites: `all` (every site of the study) or the chosen sites; only for `sites` roles.
        min_sites: Workers needed to start and to go on; None means every chosen site.
    """

    entrypoint: str
    resources: Resources
    placement: Placement
    sites: Literal["all"] | tuple[str, ...] = "all"
    min_sites: int | None = None
    nodes: int = 1

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.entrypoint)


class Requirement(msgspec.Struct, frozen=True, kw_only=True):
    """Dispatch only to sites whose evidence for `recipe` verifies (and is fresh enough).

    Attributes:
        recipe: Recipe name (name rule; no version).
        max_age_s: Oldest acceptable evidence in seconds; None accepts any age.
        signers: Signer names or roles (trust list) of which one must have signed; empty
            accepts any trusted signer.
    """

    recipe: str
    max_age_s: int | None = None
    signers: tuple[str, ...] = ()


class JobSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed job spec.

    Attributes:
        name: Job name (name rule); the job id is generated apart.
        study: Study to submit to; None means the session's study.
        code: Absolute folder of the job's code on the submitter's machine (resolved from the
            relative `code:` against the spec's folder); the client packs it.
        roles: Role name -> role, in file order.
        image: Image reference, or None for each site's default image.
        params: JSON handed to the code.
        timeout_s: Whole-job timeout in seconds.
        retries: Attempts per worker for infrastructure failures only.
        queue_timeout_s: How long the job may wait for capacity before `unschedulable`.
        end_grace_s: Once the hub role (the server) finished, how long the other workers
            may go on to exit on their own before they are stopped (`outlived-server`).
        requires: Evidence requirement, if any.
        code_digest: sha256 of the packed code bundle, filled by the client once uploaded.
        workflow: The federated workflow by name, its parameters and privacy filters
            (`cairn.spec.workflow`); None when the job's code chooses for itself.
    """

    name: str
    study: str | None = None
    code: str
    roles: dict[str, Role]
    image: str | None = None
    params: dict[str, Any] = {}
    timeout_s: int = DEFAULT_TIMEOUT_S
    retries: int = 0
    queue_timeout_s: int = DEFAULT_QUEUE_TIMEOUT_S
    end_grace_s: int = DEFAULT_END_GRACE_S
    requires: Requirement | None = None
    code_digest: str | None = None
    workflow: WorkflowRequest | None = None


def load_job_spec(path: str | Path) -> JobSpec:
    """Read `job.yaml`; `code:` is resolved against the file's folder.

    Raises:
        InvalidInput: naming file, line and field (InvalidName for a bad name).
    """
    p = Path(path)
    text = read_text(p)
    return parse_job_spec(text, str(p), p.resolve().parent)


def parse_job_spec(text: str, file: str, base_dir: str | Path) -> JobSpec:
    """Parse job spec text; `base_dir` is the folder `code:` is relative to."""
    doc = parse(text, file)
    if doc.data is None:
        raise InvalidInput("the file is empty", file=file)
    where = Located(doc)
    check_forbidden(where, doc.data)
    raw = convert(doc, _RawJob)
    if not raw.roles:
        raise where.error(("roles",), "a job needs at least one role")
    roles = {
        where.name(("roles", key), key, "role"): _role(where, key, role)
        for key, role in raw.roles.items()
    }
    if raw.image is not None and (problem := image_problem(raw.image)):
        raise where.error(("image",), problem)
    if not 0 <= raw.retries <= MAX_RETRIES:
        raise where.error(("retries",), "must be 0 or more" if raw.retries < 0
                          else f"{raw.retries} is more than the limit of {MAX_RETRIES}")
    _check_json(where, raw.params, ("params",))
    requires = None
    if raw.requires is not None:
        requires = Requirement(
            recipe=where.name(("requires", "recipe"), raw.requires.recipe, "recipe"),
            max_age_s=None
            if raw.requires.max_age is None
            else where.check(("requires", "max_age"), parse_duration, raw.requires.max_age),
            signers=where.names(("requires", "signers"), raw.requires.signers, "signer"),
        )
    return JobSpec(
        name=where.name(("name",), raw.name, "job"),
        study=None if raw.study is None else where.name(("study",), raw.study, "study"),
        code=_code_dir(where, raw.code, Path(base_dir)),
        roles=roles,
        image=raw.image,
        params=raw.params,
        timeout_s=where.check(("timeout",), parse_duration, raw.timeout),
        retries=raw.retries,
        queue_timeout_s=where.check(("queue_timeout",), parse_duration, raw.queue_timeout),
        end_grace_s=where.check(("end_grace",), parse_duration, raw.end_grace),
        requires=requires,
        workflow=None if raw.workflow is None else _workflow(doc, where, raw.workflow, roles),
    )


def _workflow(doc: YamlDocument, where: Located, data: dict[str, Any],
              roles: dict[str, Role]) -> WorkflowRequest:
    workflow = parse_workflow(doc, where, data)
    if HUB_ROLE not in roles:
        raise where.error(("workflow",), f"a workflow runs in a {HUB_ROLE!r} role: the job has "
                          f"none (roles: {', '.join(roles)})")
    return workflow


def _role(where: Located, name: str, raw: _RawRole) -> Role:
    at: PathKey = ("roles", name)
    try:
        argv = shlex.split(raw.entrypoint)
    except ValueError as exc:
        raise where.error((*at, "entrypoint"), f"cannot be split into words: {exc}") from None
    if not argv:
        raise where.error((*at, "entrypoint"), "must name a command")
    entrypoint = raw.entrypoint
    if raw.api == "flare":
        entrypoint = _flare_entrypoint(where, at, argv)
    res = (*at, "resources")
    resources = Resources(
        gpus=where.check((*res, "gpus"), parse_gpus, raw.resources.gpus),
        millicpus=where.check((*res, "cpus"), parse_cpus, raw.resources.cpus),
        memory_bytes=where.check((*res, "memory"), parse_memory, raw.resources.memory),
    )
    if resources.millicpus == 0:
        raise where.error((*res, "cpus"), "a worker needs more than 0 cpus")
    if resources.memory_bytes == 0:
        raise where.error((*res, "memory"), "a worker needs more than 0 memory")
    nodes = raw.resources.nodes
    if isinstance(nodes, bool) or not 1 <= nodes <= MAX_NODES:
        raise where.error((*res, "nodes"), "must be 1 or more" if nodes < 1
                          else f"{nodes} is more than the limit of {MAX_NODES}")
    placement = raw.placement or ("hub" if name == HUB_ROLE else "sites")
    written = where.raw(at) or {}
    if placement == "hub":
        for key in ("sites", "min_sites"):
            if key in written:
                raise where.error(
                    (*at, key),
                    "a hub role runs once, on the federation's hub "
                    "site; it takes no sites or min_sites",
                )
        return Role(entrypoint=entrypoint, resources=resources, placement="hub",
                    nodes=nodes)
    sites: Literal["all"] | tuple[str, ...]
    if isinstance(raw.sites, str):
        if raw.sites != "all":
            raise where.error((*at, "sites"), f"{raw.sites!r}: write 'all' or a list of sites")
        sites = "all"
    else:
        sites = where.names((*at, "sites"), raw.sites, "site")
        if not sites:
            raise where.error(
                (*at, "sites"), "an empty list chooses no site; write 'all' or name sites"
            )
    if raw.min_sites is not None:
        if not 1 <= raw.min_sites <= MAX_SITES:
            raise where.error((*at, "min_sites"), "must be 1 or more" if raw.min_sites < 1
                              else f"{raw.min_sites} is more than the limit of {MAX_SITES}")
        if sites != "all" and raw.min_sites > len(sites):
            raise where.error(
                (*at, "min_sites"), f"{raw.min_sites} is more than the {len(sites)} sites listed"
            )
    return Role(
        entrypoint=entrypoint,
        resources=resources,
        placement="sites",
        sites=sites,
        min_sites=raw.min_sites,
        nodes=nodes,
    )


FLARE_RUNNER = "python -m cairn.flare.run"


def _flare_entrypoint(where: Located, at: PathKey, argv: list[str]) -> str:
    """`api: flare`: the trainer runs under Cairn's FLARE Client API (`cairn.flare.run`)."""
    script = argv[1:]
    if (argv[0] not in ("python", "python3") or not script
            or (script[0].startswith("-") and script[0] != "-m") or script == ["-m"]):
        raise where.error((*at, "entrypoint"), "a role with api: flare runs a Python "
                          "trainer: write `python SCRIPT [ARGS]` or `python -m MODULE [ARGS]`")
    return f"{FLARE_RUNNER} {shlex.join(script)}"


def _code_dir(where: Located, code: str, base: Path) -> str:
    """The code folder must sit under the spec's folder: a job never names host paths."""
    refusal = "must be a folder next to the job spec, not a host path"
    rel = Path(code)
    if not code.strip() or rel.is_absolute() or code.startswith("~") or ".." in rel.parts:
        raise where.error(("code",), f"{code!r} {refusal}")
    root = base.resolve()
    target = (root / rel).resolve()
    # resolve() follows symlinks, so a link that leads out of the folder is caught too.
    if not target.is_relative_to(root):
        raise where.error(("code",), f"{code!r} leads outside the job spec's folder; {refusal}")
    if not target.is_dir():
        raise where.error(("code",), f"{code!r}: no such folder next to the job spec")
    return str(target)


def _check_json(where: Located, value: Any, path: PathKey) -> None:
    """Params are handed to the code as JSON, so only JSON values are allowed."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise where.error(path, f"key {key!r} is not a string; JSON keys are strings")
            _check_json(where, item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json(where, item, (*path, index))
    elif isinstance(value, float) and not math.isfinite(value):
        raise where.error(path, f"{value!r} is not a JSON number")
    elif value is not None and not isinstance(value, (str, int, float, bool)):
        raise where.error(path, f"{value!r} is not a JSON value (quote dates and times)")
