"""The process backend's sandbox with real workers: what a worker sees and keeps, cold and
warm alike, and what it cannot make its launcher read, delete or keep running.

Needs root (worker uids) and bwrap (Debian: apt-get install bubblewrap); skipped without.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cairn.launcher.backends import DatasetMount, LaunchFailed, LaunchHandle, _proc
from cairn.launcher.backends._sandbox import find_bwrap
from cairn.launcher.backends._uids import processes_of
from cairn.launcher.backends.process import ProcessBackend
from tests.integration.test_process_backend import log_text, make_spec

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or find_bwrap() is None,
    reason="needs root and bwrap (apt-get install bubblewrap)")

# What a worker can tell about where it runs; the same whether it was exec'd or forked.
LOOK = """\
import json, os, signal, sys
status = dict(line.rstrip("\\n").split(":\\t", 1) for line in open("/proc/self/status"))
def disposition(signum):
    handler = signal.getsignal(signum)
    return getattr(handler, "__name__", str(handler))
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
    "caps": [status[k] for k in ("CapPrm", "CapEff", "CapAmb")],
    "no_new_privs": status["NoNewPrivs"],
    "root": sorted(os.listdir("/")), "processes": len([p for p in os.listdir("/proc")
                                                       if p.isdigit()]),
    "workers": sorted(os.listdir(os.path.dirname(os.getcwd()))),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "cwd": os.getcwd(), "home": os.environ["HOME"], "argv": sys.argv, "path": sys.path,
    "flags": list(sys.flags), "name": __name__,
    "signals": {s.name: disposition(s) for s in (signal.SIGTERM, signal.SIGINT,
                                                 signal.SIGHUP, signal.SIGPIPE)},
    "env": {k: v for k, v in os.environ.items() if k not in ("HOME", "CAIRN_WORKDIR",
                                                           "CAIRN_DATA", "PWD")},
}), flush=True)
"""


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    (code / "look").mkdir(parents=True)
    (code / "look" / "__init__.py").write_text("")
    (code / "look" / "__main__.py").write_text(LOOK)
    return code


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[ProcessBackend]:
    b = ProcessBackend(tmp_path / "site", warm=True, grace_s=1.0,
                       protected=[str(tmp_path / "kit")])
    try:
        assert b.isolation.sandbox is not None and b.isolation.uids is not None
        yield b
    finally:
        await b.close()


def same(seen: dict[str, Any], key: str) -> Any:
    """`seen[key]` with the worker's own folder (whose name differs) written as <workdir>."""
    return json.loads(json.dumps(seen[key]).replace(seen["cwd"], "<workdir>"))


async def _run(backend: ProcessBackend, spec: Any) -> tuple[LaunchHandle, str]:
    handle = await backend.launch(spec)
    ended = await backend.wait(handle)
    assert (ended.exit_code, ended.cause) == (0, None), (ended, log_text(handle))
    return handle, log_text(handle)


async def test_warm_and_cold_workers_see_the_same_sandbox(
        tmp_path: Path, bundle: Path, backend: ProcessBackend) -> None:
    cold_backend = ProcessBackend(tmp_path / "cold-site", warm=False)
    try:
        _, cold_log = await _run(cold_backend, make_spec(bundle, "python -m look a", rank=0))
        cold_uids = cold_backend.isolation.uids
    finally:
        await cold_backend.close()
    assert backend._zygote is not None
    _, warm_log = await _run(backend, make_spec(bundle, "python -m look a", rank=1))
    assert backend._zygote.forked == 1  # it did come from the zygote
    cold, warm = json.loads(cold_log), json.loads(warm_log)

    for seen, uids in ((cold, cold_uids), (warm, backend.isolation.uids)):
        assert uids is not None and seen["uid"] in uids
        assert seen["gid"] == seen["uid"] and seen["groups"] == []
        assert seen["caps"] == ["0000000000000000"] * 3 and seen["no_new_privs"] == "1"
        assert seen["home"] == seen["cwd"]
        # Only its own folder of the site, and only its sandbox's processes (init, the
        # holder or not, the wrapper, itself).
        assert seen["workers"] == [os.path.basename(seen["cwd"])]
        assert seen["processes"] <= 4
        # Nothing of its launcher's or the zygote's: stdin, its log twice, and the listing.
        assert seen["fds"] == [0, 1, 2, 3]
    for key in ("root", "argv", "path", "flags", "name", "signals", "env"):
        assert same(cold, key) == same(warm, key), key
    assert warm["signals"]["SIGTERM"] == str(signal.SIG_DFL) and warm["argv"][1:] == ["a"]


async def test_datasets_are_read_only_unless_rw_and_secrets_never_mounted(
        tmp_path: Path, bundle: Path, backend: ProcessBackend) -> None:
    ro, rw = tmp_path / "ro", tmp_path / "rw"
    for folder in (ro, rw):
        folder.mkdir()
        (folder / "scan.txt").write_text("lungs")
    rw.chmod(0o777)  # the operator lets the workers' uids write there
    writer = ("import os\nroot = os.environ['CAIRN_DATA']\n"
              "print(open(root + '/ct/scan.txt').read())\n"
              "for name in ('ct', 'out'):\n"
              "    try:\n"
              "        open(f'{root}/{name}/new.txt', 'w').write('x'); print(name, 'written')\n"
              "    except OSError as exc:\n"
              "        print(name, 'refused', exc.errno)\n")
    spec = make_spec(bundle, ["python", "-c", writer], datasets={
        "ct": DatasetMount(source=str(ro), mode="ro"),
        "out": DatasetMount(source=str(rw), mode="rw")})
    _, log = await _run(backend, spec)
    assert log.splitlines() == ["lungs", "ct refused 30", "out written"]  # 30: EROFS
    assert not (ro / "new.txt").exists() and (rw / "new.txt").exists()

    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "site.creds").write_text("seed")
    with pytest.raises(LaunchFailed, match="kit"):
        await backend.launch(make_spec(bundle, "python -m look", rank=1, datasets={
            "all": DatasetMount(source=str(tmp_path))}))  # holds the kit
    assert list((tmp_path / "site" / "workers").iterdir()) == [
        Path(backend.root) / "workers" / "j1_site-a_client_0_0"]  # the refused one left none


async def test_a_worker_cannot_touch_what_its_launcher_keeps_in_its_folder(
        tmp_path: Path, bundle: Path, backend: ProcessBackend) -> None:
    decoy = tmp_path / "decoy"
    decoy.write_text("the launcher's own")
    # It tries to swap its log and its `.cairn` for links (which the launcher reads, and
    # deletes secrets under), and plants a link where the wrapper writes its record.
    tries = ("import os\n"
             "for old, new in (('worker.log', 'log.was'), ('.cairn', 'cairn.was')):\n"
             "    try:\n        os.rename(old, new); print(old, 'moved')\n"
             "    except PermissionError:\n        print(old, 'refused')\n"
             f"os.symlink({str(decoy)!r}, '.cairn/exit.json.tmp')\n"
             "raise SystemExit(3)\n")
    handle = await backend.launch(make_spec(bundle, ["python", "-c", tries]))
    ended = await backend.wait(handle)
    assert log_text(handle).splitlines() == ["worker.log refused", ".cairn refused"]
    assert decoy.read_text() == "the launcher's own"  # not written through the link
    assert (ended.exit_code, ended.cause) == (3, "crashed"), ended  # the record is its own
    # Ended, its folder is the launcher's alone: out of reach of its uid's next holder.
    folder = os.stat(handle.workdir)
    assert (folder.st_uid, folder.st_gid, folder.st_mode & 0o7777) == (
        os.getuid(), os.getgid(), 0o700)


async def test_without_a_uid_a_swapped_log_leaks_nothing(
        tmp_path: Path, bundle: Path) -> None:
    """Sandboxed as the launcher's own uid, a worker can replace its log and `.cairn`: the
    launcher follows neither link."""
    backend = ProcessBackend(tmp_path / "site", worker_uids="none", warm=True)
    decoy = tmp_path / "decoy"
    (decoy / "secrets").mkdir(parents=True)
    (decoy / "secrets" / "keep").write_text("the launcher's own")
    swap = ("import os\nprint('before', flush=True)\n"
            "os.rename('worker.log', 'worker.log.was')\n"
            f"os.symlink({str(decoy / 'secrets' / 'keep')!r}, 'worker.log')\n"
            "os.rename('.cairn', '.cairn.was')\n"
            f"os.symlink({str(decoy)!r}, '.cairn')\n"
            "raise SystemExit(3)\n")
    try:
        assert backend.isolation.sandbox is not None and backend.isolation.uids is None
        handle = await backend.launch(make_spec(bundle, ["python", "-c", swap],
                                                secret_env={"DB_PASSWORD": "s3cret"}))
        await backend.wait(handle)
        logs = b"".join([chunk async for chunk in backend.logs(handle)])
    finally:
        await backend.close()
    assert b"the launcher's own" not in logs
    assert (decoy / "secrets" / "keep").exists()  # not deleted through the link


async def test_each_running_worker_has_a_uid_of_its_own(
        bundle: Path, backend: ProcessBackend) -> None:
    held = "import os, time\nwhile not os.path.exists('go'):\n    time.sleep(0.05)\n"
    handles = [await backend.launch(make_spec(bundle, ["python", "-c", held], rank=rank))
               for rank in (0, 1)]
    try:
        owners = {os.stat(Path(h.workdir) / "look").st_uid for h in handles}
        assert len(owners) == 2 and os.getuid() not in owners
    finally:
        for h in handles:
            (Path(h.workdir) / "go").touch()
    for h in handles:
        assert (await backend.wait(h)).cause is None


async def test_a_restarted_launcher_never_hands_out_a_running_workers_uid(
        tmp_path: Path, bundle: Path) -> None:
    held = "import os, time\nwhile not os.path.exists('go'):\n    time.sleep(0.05)\n"
    first = ProcessBackend(tmp_path / "site")
    running = await first.launch(make_spec(bundle, ["python", "-c", held], rank=0))
    await first.close()  # the launcher goes; its worker stays
    second = ProcessBackend(tmp_path / "site")
    try:
        assert await second.reattach(running) == running
        other = await second.launch(make_spec(bundle, "python -m look", rank=1))
        assert (await second.wait(other)).cause is None
        assert json.loads(log_text(other))["uid"] != os.stat(running.workdir).st_gid
        # The other's end (and its uid's clean-up) left the first one running.
        assert _proc.is_ours(int(running.native_id), running.start_ticks)
        (Path(running.workdir) / "go").touch()
        assert (await second.wait(running)).cause is None
    finally:
        (Path(running.workdir) / "go").touch()
        await second.close()


async def test_what_a_worker_leaves_running_dies_with_it(
        bundle: Path, backend: ProcessBackend) -> None:
    # A daemon in a session of its own: outside the worker's process group, so only the
    # sandbox's end (and the uid's) takes it.
    daemon = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n"
              "    if os.fork() == 0:\n        time.sleep(600)\n    os._exit(0)\n"
              "os.wait()\nprint('left one behind', flush=True)\n")
    handle = await backend.launch(make_spec(bundle, ["python", "-c", daemon]))
    uid = os.stat(handle.workdir).st_gid  # its group, while it runs: its uid
    assert (await backend.wait(handle)).cause is None
    assert "left one behind" in log_text(handle)
    assert uid != os.getuid()
    deadline = time.monotonic() + 10  # SIGKILLed at the end: gone in moments
    while processes_of(uid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert processes_of(uid) == []


def test_the_interpreter_and_its_libraries_are_all_it_needs(tmp_path: Path) -> None:
    """The static view holds this interpreter (a worker imports the SDK from it)."""
    box = ProcessBackend(tmp_path / "site").isolation.sandbox
    assert box is not None
    roots = [str(r) for r in box.roots]
    assert any(sys.base_prefix == r or sys.base_prefix.startswith(r + "/") for r in roots)
    assert not any(str(tmp_path).startswith(r) for r in roots)
