"""Where `cairn up`, the first job and an idle site spend their time and memory, as a user
runs them: the `cairn` command in a process of its own, secure by default.

- start: `cairn up --check` from the command's start (before its interpreter runs) to every
  service healthy, per phase (`cairn.runtime.phases` marks: interpreter and CLI import, the
  parents' preload, provisioning, nats-server ready, the authority's first answer, each
  parent's connect and ready, healthy, stop), on a directory it started in before (its
  kits are reused) and, once, on a fresh one (provisioned then);
- first job: `cairn up` running, a client as its context says: the FedAvg example (3 rounds,
  2 client sites) right after the start, then warm; per phase from the job's own events
  (submitted, deployed, launch asked, worker launching, running, ...); a probe worker's
  first line, its SDK imported, its connection made; spec load and signing in this process;
- idle memory: RSS, PSS and USS of every process of the federation once started and idle,
  and per site its parent plus its warm interpreter;
- imports: the top modules by self import time (`-X importtime`) on the start path and on
  a worker's, and the top packages by memory retained once imported (`tracemalloc`).

`run()` returns the section for `tools/bench.py` (its `targets` block reads it); progress
goes to stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "fedavg"
UP_RUNS = 5
WARM_JOBS = 3
PROBES = 3

PROBE = """\
import json, os, sys, time
t = {"first_line": time.time()}
before = set(sys.modules)
from cairn.worker import Worker, main
t["imported"] = time.time()

async def run(w: Worker) -> None:
    t["connected"] = time.time()
    t["imported_on_the_way"] = sorted(m for m in set(sys.modules) - before
                                      if m.split(".")[0] in ("cairn", "nats", "msgspec"))
    with open(os.path.join(os.environ["CAIRN_WORKDIR"], "probe.json"), "w") as f:
        json.dump(t, f)

main(run)
"""


def _say(message: str) -> None:
    print(f"[bench perf] {message}", file=sys.stderr, flush=True)


def _stats(values: list[float]) -> dict[str, float] | None:
    values = [v for v in values if v == v]  # NaN: a phase this run did not reach
    if not values:
        return None
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


def _env(phases_file: Path | None, context: Path | None = None) -> dict[str, str]:
    # Without PYTHONDONTWRITEBYTECODE, as a user's shell runs it: their first `cairn up`
    # writes the bytecode every later start reads (with it, each start compiles every module
    # it imports that was installed uncompiled, `make install`'s --no-compile).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CAIRN_") and k != "PYTHONDONTWRITEBYTECODE"}
    if phases_file is not None:
        env["CAIRN_PHASES"] = str(phases_file)
    if context is not None:
        env["CAIRN_CONTEXT"] = str(context)
    return env


# -- start ---------------------------------------------------------------------------------

def _first(marks: list[dict[str, Any]], phase: str, site: str | None = None,
           services: str | None = None) -> float:
    for m in marks:
        if m.get("phase") == phase and (site is None or m.get("site") == site) and (
                services is None or m.get("services") == services):
            return float(m["t"])
    return float("nan")


def _breakdown(marks: list[dict[str, Any]], launched: float, ended: float) -> dict[str, float]:
    """Seconds per phase of one `cairn up --check`: from the command's start to `cairn up`'s
    first mark, then from each of its marks to the next (`a->b`), each parent's connect and
    ready, the whole command, and from its start to healthy."""
    own = sorted((float(m["t"]), str(m["phase"])) for m in marks
                 if str(m.get("phase", "")).startswith("up."))
    out: dict[str, float] = {}
    previous, name = launched, "command"
    for t, phase in own:
        out[f"{name}->{phase.removeprefix('up.')}_s"] = t - previous
        previous, name = t, phase.removeprefix("up.")
    out["exit_after_stop_s"] = ended - previous
    out["from_command_start_s"] = _first(marks, "up.healthy") - launched
    out["command_wall_s"] = ended - launched
    parents = {(str(m["site"]), str(m.get("services", ""))) for m in marks
               if m.get("phase") == "parent.start"}
    for site, services in sorted(parents):
        # The HTTP API's parent runs at the hub's site too, beside the hub's own.
        name = "api" if services == "httpapi" else site
        start = _first(marks, "parent.start", site, services)
        connected = _first(marks, "parent.connected", site, services)
        out[f"parent_{name}_connect_s"] = connected - start
        out[f"parent_{name}_ready_after_connect_s"] = _first(
            marks, "parent.ready", site, services) - connected
        out[f"parent_{name}_ready_s"] = _first(marks, "parent.ready", site, services) - launched
    return out


def _up_check(dir_: Path, work: Path, tag: str) -> dict[str, float]:
    try:
        from cairn.runtime import phases
    except ImportError:  # a checkout from before the marks: the command's own figures only
        phases = None

    marks_file = work / f"phases-{tag}.jsonl"
    launched = time.time()
    done = subprocess.run([sys.executable, "-m", "cairn", "up", "--check", "--dir", str(dir_)],
                          cwd=work, env=_env(marks_file), capture_output=True, text=True,
                          timeout=180, check=True)
    out = _breakdown(phases.read(marks_file) if phases else [], launched, time.time())
    # What the command itself says: healthy after its parents' start, and after its own.
    found = re.search(r"in ([\d.]+)s \(([\d.]+)s from start\)", done.stdout)
    out["cli_says_healthy_s"] = float(found.group(1)) if found else float("nan")
    out["cli_says_from_start_s"] = float(found.group(2)) if found else float("nan")
    return out


def start(runs: int = UP_RUNS) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cairn-bench-perf-up-") as tmp:
        work = Path(tmp)
        cold = [_up_check(work / f"fresh-{i}", work, f"fresh-{i}") for i in range(2)]
        _say(f"fresh dir: healthy {cold[-1]['from_command_start_s']:.3f}s from the command's "
             "start")
        reused = [_up_check(work / "fresh-0", work, f"again-{i}") for i in range(runs)]
        _say("again: " + ", ".join(f"{r['from_command_start_s']:.3f}s" for r in reused))
    return {"runs": runs,
            "reused_dir": {k: _stats([r[k] for r in reused]) for k in reused[0]},
            "fresh_dir": {k: _stats([r[k] for r in cold]) for k in cold[0]}}


# -- memory --------------------------------------------------------------------------------

def memory_of(pid: int) -> dict[str, float] | None:
    """RSS, PSS and USS (private pages) of one process, MiB."""
    kb: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[1].isdigit():
                    kb[parts[0].rstrip(":")] = int(parts[1])
    except OSError:
        return None
    return {"rss_mib": round(kb.get("Rss", 0) / 1024, 1),
            "pss_mib": round(kb.get("Pss", 0) / 1024, 1),
            "uss_mib": round((kb.get("Private_Clean", 0) + kb.get("Private_Dirty", 0)) / 1024,
                             1)}


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _warm_interpreters(up_pid: int, parents: dict[str, int]) -> dict[str, int]:
    """Parent name -> its warm interpreter: forked by `cairn up` (its stderr is that
    parent's log) or started by the parent itself (`_zygote` in its command line)."""
    found: dict[str, int] = {}
    for name, pid in parents.items():
        for child in _children(pid):
            try:
                if b"_zygote" in Path(f"/proc/{child}/cmdline").read_bytes():
                    found[name] = child
            except OSError:
                continue
    known = set(parents.values())
    for child in _children(up_pid):
        if child in known:
            continue
        try:
            log = os.readlink(f"/proc/{child}/fd/2")
        except OSError:
            continue
        for name in parents:
            if log.endswith(f"/logs/{name}.log"):
                found.setdefault(name, child)
    return found


def idle_memory(up_pid: int, dir_: Path) -> dict[str, Any]:
    from cairn.runtime.dirlock import read_holder

    holder = read_holder(dir_)
    started = {s.name: s.pid for s in holder.started} if holder else {}
    parents = {n: p for n, p in started.items() if n == "coordinator" or n.startswith("site-")}
    warm = _warm_interpreters(up_pid, parents)
    processes: dict[str, Any] = {"cairn up": memory_of(up_pid)}
    for name, pid in started.items():
        processes[name] = memory_of(pid)
    for name, pid in warm.items():
        processes[f"{name} warm interpreter"] = memory_of(pid)
    sites: dict[str, Any] = {}
    for name, pid in parents.items():
        parent, zygote = memory_of(pid), memory_of(warm[name]) if name in warm else None
        if parent is None:
            continue
        sites[name] = {k: round(parent[k] + (zygote or {}).get(k, 0.0), 1) for k in parent}
        sites[name]["warm_interpreter"] = zygote is not None
    site_pss = [v["pss_mib"] for k, v in sites.items() if k.startswith("site-")]
    return {"processes": processes, "per_site_parent_plus_warm_interpreter": sites,
            "per_site_max_pss_mib": max(site_pss) if site_pss else None,
            "total_pss_mib": round(sum(m["pss_mib"] for m in processes.values() if m), 1)}


# -- the first job ------------------------------------------------------------------------

def _job_dir(dest: Path, **params: Any) -> Path:
    from bench_fedavg import _fedavg_job

    return _fedavg_job(dest, **params)


def _probe_dir(dest: Path) -> Path:
    from bench_fedavg import one_script_job

    return one_script_job(dest, "probe", PROBE)


async def _timed_job(client: Any, spec: Path) -> tuple[str, float, float, Any]:
    """(job id, submit -> submitted reply, submit -> completed, final state)."""
    t0 = time.time()
    job = await client.submit(spec)
    replied = time.time() - t0
    final = await client.wait(job, timeout=300, poll=0.02)
    took = time.time() - t0
    if final.state != "completed":
        raise RuntimeError(f"job {job} ended {final.state}: {final.message}")
    return job, replied, took, (final, t0)


async def _timeline(client: Any, job: str, t0: float) -> dict[str, float]:
    """Event type -> seconds after submit of its first occurrence in the job's events."""
    _, entries = await client.replay(job)
    first: dict[str, float] = {}
    for e in entries:
        if e.at is not None and e.type not in first:
            first[e.type] = round(e.at.timestamp() - t0, 4)
    return first


def _sign_and_load(spec: Path) -> dict[str, float | None]:
    """Spec load, code bundle and request signing, in this process (ms, median of 20)."""
    from cairn import api
    from cairn import codebundle as bundle
    from cairn.client.jobrequest import request_of_spec
    from cairn.spec.job import load_job_spec
    from cairn.trust.requests import RequestSigner

    creds = os.environ.get("_BENCH_ADMIN_CREDS", "")
    loads, packs, signs = [], [], []
    signer = RequestSigner.from_creds(Path(creds)) if creds else None
    for _ in range(20):
        t0 = time.perf_counter()
        loaded = load_job_spec(spec)
        t1 = time.perf_counter()
        packed = bundle.pack(loaded.code)
        t2 = time.perf_counter()
        if signer is not None:
            signer.sign(api.Envelope(request=api.Submit(spec=request_of_spec(loaded,
                                                                             packed.digest)),
                                     actor="admin@coord", study="demo"))
        t3 = time.perf_counter()
        loads.append(t1 - t0)
        packs.append(t2 - t1)
        signs.append(t3 - t2)
    mints = []
    site_creds = os.environ.get("_BENCH_SITE_CREDS", "")
    if site_creds:
        from cairn.trust.workers import worker_secrets

        for i in range(20):
            t0 = time.perf_counter()
            worker_secrets(site_creds, None, study="demo", job=f"j-{i}", site="site-a",
                           role="client", attempt=0, launch_id=f"j-{i}/site-a/client/0/0",
                           timeout_s=600)
            mints.append(time.perf_counter() - t0)
    return {"spec_load_ms": round(statistics.median(loads) * 1000, 3),
            "bundle_ms": round(statistics.median(packs) * 1000, 3),
            "sign_ms": round(statistics.median(signs) * 1000, 3),
            "worker_credential_mint_ms": round(statistics.median(mints) * 1000, 3)
            if mints else None}


async def _jobs(work: Path, fed_dir: Path, context: Path) -> dict[str, Any]:
    from cairn.client import Client
    from cairn.runtime import context as ctx_file

    sys.path.insert(0, str(EXAMPLE))
    import setup_data

    setup_data.write(fed_dir / "sites", hub="hub")
    ctx = ctx_file.load(context)
    assert ctx is not None
    client = await Client.connect(ctx)
    try:
        job, replied, first, (final, t0) = await _timed_job(client, _job_dir(work / "job-1",
                                                                             rounds=3))
        [value] = [r.value for r in final.results if r.role == "server"]
        rounds = value["rounds"]
        phases = await _timeline(client, job, t0)
        _say(f"first FedAvg in {first:.3f}s")
        warm = [(await _timed_job(client, _job_dir(work / f"job-w{i}", rounds=3)))[2]
                for i in range(WARM_JOBS)]
        _say("warm FedAvg: " + ", ".join(f"{w:.3f}s" for w in warm))
        probes = []
        for i in range(PROBES):
            pjob, _, _, (_, pt0) = await _timed_job(client, _probe_dir(work / f"probe-{i}"))
            [mark] = list((fed_dir / "sites" / "site-a" / "work" / "workers").glob(
                f"{pjob}*/probe.json"))
            seen = json.loads(mark.read_text())
            probes.append({"first_line_s": seen["first_line"] - pt0,
                           "worker_import_s": seen["imported"] - seen["first_line"],
                           "worker_connect_s": seen["connected"] - seen["imported"],
                           "imported_on_the_way": seen["imported_on_the_way"]})
    finally:
        await client.close()
    os.environ["_BENCH_ADMIN_CREDS"] = str(ctx.creds or "")
    site_kit = fed_dir / "trust" / "kits" / "site-a" / "site.creds"
    os.environ["_BENCH_SITE_CREDS"] = str(site_kit) if site_kit.exists() else ""
    local = _sign_and_load(work / "job-1" / "job.yaml")
    return {
        "first_fedavg": {"submit_to_completed_s": round(first, 4),
                         "submit_reply_s": round(replied, 4),
                         "events_after_submit_s": phases,
                         "round_wall_s": [round(r["wall_s"], 4) for r in rounds],
                         "round_overhead_s": [round(r["overhead_s"], 4) for r in rounds]},
        "warm_fedavg_submit_to_completed_s": _stats(warm),
        "round_overhead_ms_median": round(statistics.median(r["overhead_s"] for r in rounds)
                                          * 1000, 3),
        "probe_worker": {k: _stats([p[k] for p in probes]) for k in
                         ("first_line_s", "worker_import_s", "worker_connect_s")},
        "cold_imports_on_the_worker_path": sorted({m for p in probes
                                                   for m in p["imported_on_the_way"]}),
        "in_this_process": local,
    }


def first_job() -> dict[str, Any]:
    """`cairn up` in the background; the first job and the idle memory before it."""
    with tempfile.TemporaryDirectory(prefix="cairn-bench-perf-job-") as tmp:
        work = Path(tmp)
        fed_dir, context = work / "fed", work / "context.yaml"
        launched = time.time()
        up = subprocess.Popen([sys.executable, "-m", "cairn", "up", "--dir", str(fed_dir)],
                              cwd=work, env=_env(work / "phases.jsonl", context),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while not context.exists():
                if up.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"cairn up did not come up (exit {up.poll()})")
                time.sleep(0.02)
            _say(f"cairn up wrote its context after {time.time() - launched:.2f}s")
            time.sleep(2.0)  # idle
            memory = idle_memory(up.pid, fed_dir)
            jobs = asyncio.run(_jobs(work, fed_dir, context))
            time.sleep(1.0)
            jobs["idle_memory_after_jobs"] = idle_memory(up.pid, fed_dir)
        finally:
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(60)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
    return {"idle_memory": memory, **jobs}


# -- imports and retained memory ----------------------------------------------------------

PRELOAD = ("from cairn.runtime.forked import preload; "
           "preload(('coordinator', 'validator', 'signer', 'agent', 'launcher', "
           "'snapshotter'))")
WORKER_PATH = ("import cairn.worker, cairn.worker.rounds, cairn.trust.connect, "
               "cairn.runtime.context")


def _importtime(code: str, top: int = 12) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=_env(None),
                          capture_output=True, text=True, timeout=120, check=True)
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        head, cumulative, name = line.split("|")
        rows.append((int(head.split(":")[1]), int(cumulative), name.strip()))
    rows.sort(reverse=True)
    return {"modules": len(rows), "self_ms_total": round(sum(r[0] for r in rows) / 1000, 1),
            "top_self_ms": {name: round(us / 1000, 1) for us, _, name in rows[:top]}}


RETAINED = """\
import json, sys, tracemalloc
tracemalloc.start()
{code}
snap = tracemalloc.take_snapshot()
by = {{}}
for stat in snap.statistics("filename"):
    path = stat.traceback[0].filename
    parts = path.replace("\\\\", "/").split("/")
    if "site-packages" in parts:
        name = parts[parts.index("site-packages") + 1]
    elif "cairn" in parts:
        name = "cairn." + parts[parts.index("cairn") + 1].removesuffix(".py")
    else:
        name = "stdlib:" + parts[-1].removesuffix(".py")
    by[name] = by.get(name, 0) + stat.size
top = sorted(by.items(), key=lambda kv: -kv[1])[:{top}]
print(json.dumps({{"total_mib": round(sum(by.values()) / 2**20, 2),
                  "top_mib": {{k: round(v / 2**20, 2) for k, v in top}}}}))
"""


def _retained(code: str, top: int = 12) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", RETAINED.format(code=code, top=top)],
                          env=_env(None), capture_output=True, text=True, timeout=120,
                          check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _numpy_import_s(runs: int = 3) -> dict[str, float] | None:
    """What the FedAvg example's own first import costs a fresh interpreter (a job's import:
    never preloaded, see cairn.launcher.backends._zygote)."""
    took = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", "import time; t = time.perf_counter(); "
                               "import numpy; print(time.perf_counter() - t)"],
                              env=_env(None), capture_output=True, text=True, timeout=60,
                              check=True)
        took.append(float(done.stdout.strip()))
    return _stats(took)


def imports() -> dict[str, Any]:
    return {"numpy_import_s": _numpy_import_s(),"importtime_parents_preload": _importtime(PRELOAD),
            "importtime_cli": _importtime("import cairn.cli.main, cairn.cli.up"),
            "importtime_worker_path": _importtime(WORKER_PATH),
            "tracemalloc_parents_preload": _retained(PRELOAD),
            "tracemalloc_worker_path": _retained(WORKER_PATH)}


def run() -> dict[str, Any]:
    load = os.getloadavg()
    result: dict[str, Any] = {"start": start(), "first_job": first_job(), "imports": imports()}
    result["load_avg_1_5_15"] = [round(x, 2) for x in (*load[:1], *os.getloadavg()[1:])]
    return result


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
