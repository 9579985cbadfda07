"""Laws of the site reducers (agent and launcher) and the agent's pure decision on a deploy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from cairn import events as ev
from cairn.spec.runtime import parse_study_runtime
from cairn.state import agent as agent_state
from cairn.state import launch as launch_state
from cairn.state.launch import LAUNCH_ORDER, make_launch_id

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SITE = "site-a"
JOBS = ("j-1", "j-2")
RUNTIME = parse_study_runtime(
    "format: 1\nstudies:\n  demo:\n    images: {default: python:3.12, approved: ['lab/*']}\n"
    "    limits: {cpus: 8, memory: 8Gi, gpus: 2, concurrent_jobs: 4}\n",
    "study_runtime.yaml", ".")
INVENTORY = ev.Resources(gpus=2, millicpus=4000, memory_bytes=4 << 30)
ONE_CPU = ev.Resources(gpus=0, millicpus=1000, memory_bytes=256 << 20)


def base(i: int) -> dict[str, object]:
    return {"id": f"e{i}", "at": T0 + timedelta(seconds=i), "source": "test@hub",
            "study": "demo"}


def ids(job: str, attempt: int = 0) -> dict[str, object]:
    return {"job": job, "site": SITE, "role": "client", "rank": 0, "attempt": attempt}


def lid(job: str, attempt: int = 0) -> str:
    return make_launch_id(job, SITE, "client", 0, attempt)


def site_event(kind: str, job: str, i: int) -> object:
    b, w = base(i), ids(job)
    return {
        "accepted": lambda: ev.DeploymentAccepted(**b, **w, launch_id=lid(job),
                                                  resources=ONE_CPU),
        "rejected": lambda: ev.DeploymentRejected(**b, **w, reason="site-policy", message="no"),
        "requested": lambda: ev.LaunchRequested(**b, **w, launch_id=lid(job), entrypoint="x"),
        "launching": lambda: ev.WorkerLaunching(**b, **w, launch_id=lid(job), backend="p"),
        "running": lambda: ev.WorkerRunning(**b, **w, launch_id=lid(job), native_id="42"),
        "cancel": lambda: ev.LaunchCancel(**b, job=job, site=SITE, launch_id=lid(job)),
        "exited": lambda: ev.WorkerExited(**b, **w, launch_id=lid(job), exit_code=137,
                                          reason="crashed"),
    }[kind]()  # type: ignore[no-any-return]


KINDS = ["accepted", "rejected", "requested", "launching", "running", "cancel", "exited"]
histories = st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(JOBS)), max_size=30).map(
    lambda pairs: [site_event(k, j, i) for i, (k, j) in enumerate(pairs)])


@settings(max_examples=200, deadline=None)
@given(histories, st.integers(min_value=0, max_value=30))
def test_folding_at_once_equals_folding_in_parts(events: list[object], cut: int) -> None:
    for reducer in (agent_state, launch_state):
        whole = reducer.fold(events)  # type: ignore[attr-defined]
        assert reducer.fold(events[cut:], reducer.fold(events[:cut])) == whole  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(histories)
def test_a_launch_never_moves_backwards_and_a_decision_is_never_undone(
        events: list[object]) -> None:
    launches, agent = launch_state.Launches(), agent_state.AgentState()
    for event in events:
        new_launches = launch_state.apply(launches, event)
        for key, before in launches.launches.items():
            after = new_launches.launches[key]
            assert LAUNCH_ORDER[after.state] >= LAUNCH_ORDER[before.state]
            assert after.requested_at == before.requested_at  # the first request stays
            assert after.cancelled or not before.cancelled
        new_agent = agent_state.apply(agent, event)
        assert agent.decided <= new_agent.decided
        assert set(new_agent.allocations) <= new_agent.decided
        launches, agent = new_launches, new_agent


def test_an_exited_worker_frees_what_it_held_and_stays_decided() -> None:
    accepted, exited = site_event("accepted", "j-1", 1), site_event("exited", "j-1", 2)
    held = agent_state.fold([accepted])
    assert held.free(INVENTORY).millicpus == 3000 and [a.job for a in held.of_job("j-1")]
    done = agent_state.apply(held, exited)
    assert done.free(INVENTORY) == INVENTORY and lid("j-1") in done.decided
    # A replayed acceptance after the exit must not hold the resources again.
    assert agent_state.apply(done, accepted) == done


def test_a_cancelled_worker_killed_by_a_signal_ended_by_the_cancel() -> None:
    launches = launch_state.fold([site_event(k, "j-1", i) for i, k in
                                  enumerate(["requested", "launching", "running", "cancel"])])
    launch = launches.launches[lid("j-1")]
    assert launch.cancelled and launch.state == "running" and launch.native_id == "42"
    assert launch_state.exit_cause(launch, 143, "crashed") == "cancelled"
    assert launch_state.exit_cause(launch, 0, None) is None
    assert launch_state.exit_cause(launch, 1, "crashed") == "crashed"  # failed on its own
    assert launch_state.exit_cause(launch, 137, "oom") == "oom"


def test_a_request_under_a_fresh_message_id_is_not_new() -> None:
    first = site_event("requested", "j-1", 1)
    launches = launch_state.fold([first])
    again = ev.LaunchRequested(**base(99), **ids("j-1"), launch_id=lid("j-1"),  # type: ignore[arg-type]
                               entrypoint="x")
    assert not launch_state.is_new(launches, again.launch_id)
    assert launch_state.apply(launches, again) == launches


def deploy(image: str | None = None, gpus: int = 0, attempt: int = 0,
           millicpus: int = 1000, nodes: int = 1) -> ev.DeployCommand:
    return ev.DeployCommand(**base(5), **ids("j-1", attempt), entrypoint="python x",  # type: ignore[arg-type]
                            image=image, resources=ev.Resources(gpus=gpus, millicpus=millicpus,
                                                                memory_bytes=1 << 20),
                            nodes=nodes)


def decide(cmd: ev.DeployCommand, state: agent_state.AgentState | None = None,
           caps: frozenset[str] | None = frozenset({"gpu", "cancel"})
           ) -> agent_state.Verdict | None:
    return agent_state.decide(state or agent_state.AgentState(), cmd,
                              policy_file="study_runtime.yaml", runtime=RUNTIME,
                              inventory=INVENTORY, gpu_ids=["0", "1"],
                              backend=None if caps is None else ("process", caps))


def test_an_image_on_a_backend_without_containers_is_refused_naming_both() -> None:
    verdict = decide(deploy(image="lab/trainer:1"))
    assert verdict is not None and verdict.reason == "site-policy"
    assert verdict.missing_capability == "containers"
    assert "process backend" in verdict.message and "lab/trainer:1" in verdict.message
    # The site's default image is no container request; a container backend takes either.
    assert decide(deploy(image="python:3.12")).accepted  # type: ignore[union-attr]
    assert decide(deploy(image="lab/trainer:1"),
                  caps=frozenset({"containers"})).accepted  # type: ignore[union-attr]


def test_gpus_on_a_backend_without_gpus_are_refused_and_given_where_it_has_them() -> None:
    refused = decide(deploy(gpus=1), caps=frozenset({"containers"}))
    assert refused is not None and refused.missing_capability == "gpu"
    accepted = decide(deploy(gpus=1))
    assert accepted is not None and accepted.accepted and accepted.gpus == ("0",)


def test_policy_comes_before_capabilities_and_room_after_them() -> None:
    not_approved = decide(deploy(image="evil/miner:1"))
    assert not_approved is not None and not_approved.reason == "image-not-approved"
    full = decide(deploy(millicpus=6000))  # within the study's 8 cpus, past the site's 4
    assert full is not None and full.reason == "infrastructure" and "is full" in full.message
    over = decide(deploy(millicpus=9000))
    assert over is not None and over.reason == "over-study-limit"
    unknown_backend = decide(deploy(image="lab/trainer:1"), caps=None)
    assert unknown_backend is not None and unknown_backend.accepted  # the launcher checks


def test_a_decided_launch_id_is_never_decided_again() -> None:
    state = agent_state.fold([site_event("rejected", "j-1", 1)])
    assert decide(deploy(), state) is None
    assert decide(deploy(attempt=1), state) is not None  # a new attempt is a new launch


def test_the_launcher_refuses_gpus_its_backend_has_not() -> None:
    request = ev.LaunchRequested(**base(1), **ids("j-1"), launch_id=lid("j-1"),  # type: ignore[arg-type]
                                 entrypoint="x", gpus=["0"])
    why = launch_state.unsupported(request, "process", frozenset({"cancel"}))
    assert why is not None and "gpu" in why and "process backend" in why
    assert launch_state.unsupported(request, "docker", frozenset({"gpu"})) is None


def test_several_nodes_need_a_multi_node_backend_and_room_for_every_node() -> None:
    refused = decide(deploy(nodes=2))
    assert refused is not None and refused.reason == "site-policy"
    assert refused.missing_capability == "multi-node" and "spans 2 nodes" in refused.message
    batch = frozenset({"gpu", "multi-node"})
    accepted = decide(deploy(nodes=2, millicpus=2000), caps=batch)
    assert accepted is not None and accepted.accepted
    # 3 nodes of 2 cpus is 6 cpus: within the study's 8, past the site's 4.
    full = decide(deploy(nodes=3, millicpus=2000), caps=batch)
    assert full is not None and full.reason == "infrastructure" and "6 cpus" in full.message
    request = ev.LaunchRequested(**base(1), **ids("j-1"), launch_id=lid("j-1"),  # type: ignore[arg-type]
                                 entrypoint="x", nodes=2)
    assert "multi-node" in (launch_state.unsupported(request, "docker", frozenset()) or "")
    assert launch_state.unsupported(request, "slurm", batch) is None
