"""A site agent's view: which deployments it decided and what they hold. A pure fold over the
site's job events (accepted, rejected, exited), and the pure decision on a deploy command.

A launch id decided once is never decided again, whatever message id its command arrives
under: that is what keeps a replayed command from starting a second worker.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec

from cairn.events import (
    DeployCommand,
    DeploymentAccepted,
    DeploymentRejected,
    Resources,
    WorkerExited,
    worker_ref,
)
from cairn.spec.policy import StudyUsage, check_deployment
from cairn.spec.runtime import StudyRuntime

GPU, MULTI_NODE, CONTAINERS = "gpu", "multi-node", "containers"
"""Capability names a launcher declares for its backend (`site.backend`) and a deploy needs."""


class Allocation(msgspec.Struct, frozen=True, kw_only=True):
    """What one accepted deployment holds until its worker exits."""

    launch_id: str
    study: str
    job: str
    resources: Resources
    gpus: tuple[str, ...] = ()


class AgentState(msgspec.Struct, frozen=True, kw_only=True):
    """Attributes:
    allocations: Live allocations by launch id.
    decided: Every launch id accepted or rejected here, live or not.
    """

    allocations: dict[str, Allocation] = {}
    decided: frozenset[str] = frozenset()

    def used(self) -> Resources:
        """Everything the live allocations hold."""
        return sum((a.resources for a in self.allocations.values()), Resources.zero())

    def free(self, inventory: Resources) -> Resources:
        return inventory - self.used()

    def of_study(self, study: str) -> list[Allocation]:
        return [a for _, a in sorted(self.allocations.items()) if a.study == study]

    def of_job(self, job: str) -> list[Allocation]:
        return [a for _, a in sorted(self.allocations.items()) if a.job == job]

    def free_gpus(self, gpu_ids: Sequence[str]) -> list[str]:
        taken = {g for a in self.allocations.values() for g in a.gpus}
        return [g for g in gpu_ids if g not in taken]


def apply(state: AgentState, event: object) -> AgentState:
    """Apply one site job event; others leave the state as it is."""
    match event:
        case DeploymentAccepted():
            if event.launch_id in state.decided:
                return state
            allocation = Allocation(launch_id=event.launch_id, study=event.study or "",
                                    job=event.job, resources=event.resources,
                                    gpus=tuple(event.gpus))
            return AgentState(allocations={**state.allocations, event.launch_id: allocation},
                              decided=state.decided | {event.launch_id})
        case DeploymentRejected():
            launch_id = worker_ref(event).launch_id
            if launch_id in state.decided:
                return state
            return msgspec.structs.replace(state, decided=state.decided | {launch_id})
        case WorkerExited():
            if event.launch_id not in state.allocations and event.launch_id in state.decided:
                return state
            allocations = {k: v for k, v in state.allocations.items() if k != event.launch_id}
            return AgentState(allocations=allocations, decided=state.decided | {event.launch_id})
    return state


def fold(events: Iterable[object], initial: AgentState | None = None) -> AgentState:
    """`functools.reduce(apply, events, initial)`."""
    return functools.reduce(apply, events, initial or AgentState())


def needed_capabilities(cmd: DeployCommand, default_image: str | None) -> dict[str, str]:
    """What a deployment needs of the site's backend: capability name -> why, for people."""
    needs: dict[str, str] = {}
    if cmd.resources.gpus > 0:
        needs[GPU] = f"it asks for {cmd.resources.gpus} GPU(s)"
    if cmd.nodes > 1:
        needs[MULTI_NODE] = f"one worker spans {cmd.nodes} nodes"
    if cmd.image and cmd.image != default_image:
        needs[CONTAINERS] = f"it asks for the image {cmd.image}"
    return needs


def missing_capability_message(why: str, capability: str, backend: str,
                               capabilities: frozenset[str]) -> str:
    """For people: what the deployment needs, that the site's backend lacks it, what to do."""
    has = ", ".join(sorted(capabilities)) or "nothing declared"
    return (f"{why}, but this site's {backend} backend has no {capability} capability "
            f"(it has: {has}); drop that from the job, or run it at a site whose backend "
            f"has it")


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """The agent's answer to one deploy command.

    Attributes:
        reason: The closed-set cause when rejected; None when accepted.
        missing_capability: The backend capability whose lack rejected it ("" otherwise).
        gpus: The GPU ids given to an accepted deployment.
    """

    launch_id: str
    reason: str | None = None
    message: str = ""
    missing_capability: str = ""
    gpus: tuple[str, ...] = ()

    @property
    def accepted(self) -> bool:
        return self.reason is None


def study_usage(state: AgentState, study: str) -> StudyUsage:
    held = state.of_study(study)
    return StudyUsage(resources=sum((a.resources for a in held), Resources.zero()),
                      jobs=frozenset(a.job for a in held))


def decide(state: AgentState, cmd: DeployCommand, *, policy_file: str | Path,
           runtime: StudyRuntime | None, inventory: Resources, gpu_ids: Sequence[str],
           backend: tuple[str, frozenset[str]] | None) -> Verdict | None:
    """Decide a deploy command; None when its launch id was decided before.

    In order: the study's policy at this site, what the backend can do (`backend` is its name
    and declared capabilities; None when the launcher has not declared them), then room.
    """
    launch_id = worker_ref(cmd).launch_id
    if launch_id in state.decided:
        return None
    study = cmd.study or ""
    # A worker on several nodes holds its resources on each: limits and room see them all.
    decision = check_deployment(policy_file, runtime, study, cmd.resources.times(cmd.nodes),
                                cmd.image, study_usage(state, study), job=cmd.job,
                                privacy=cmd.privacy)
    if not decision.accepted:
        return Verdict(launch_id=launch_id, reason=str(decision.cause),
                       message=decision.message)
    assert runtime is not None  # an accepted policy decision had a runtime
    if backend is not None:
        needs = needed_capabilities(cmd, runtime.studies[study].images.default)
        for name in sorted(needs):
            if name not in backend[1]:
                return Verdict(launch_id=launch_id, reason="site-policy",
                               missing_capability=name,
                               message=missing_capability_message(needs[name], name, *backend))
    full = over_capacity(state, cmd.resources.times(cmd.nodes), inventory, cmd.site)
    if full is not None:
        return Verdict(launch_id=launch_id, reason="infrastructure", message=full)
    return Verdict(launch_id=launch_id,
                   gpus=tuple(state.free_gpus(gpu_ids)[:cmd.resources.gpus]))


def over_capacity(state: AgentState, want: Resources, inventory: Resources,
                  site: str) -> str | None:
    """Why `want` does not fit in what the site has free, or None when it fits."""
    free = state.free(inventory)
    if want.fits_in(free):
        return None
    return f"site {site} is full: asked {want.describe()}, free {free.describe()}"
