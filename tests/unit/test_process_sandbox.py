"""The process backend's isolation, piece by piece: the sandbox's view as bwrap arguments,
what is protected, worker uids, the choice `auto` makes, and how the launcher reads back and
the wrapper writes into a folder a worker owns. No worker runs here (tests/integration/
test_sandbox.py runs them)."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from cairn.errors import InvalidInput, Unavailable
from cairn.launcher.backends import LaunchSpec, make_launch_id
from cairn.launcher.backends import _isolation as isolation
from cairn.launcher.backends._exitwrap import write_record
from cairn.launcher.backends._sandbox import Protected, Sandbox, minimal
from cairn.launcher.backends._uids import UidPool, auto_range
from cairn.launcher.backends._workdir import read_chunk, read_under
from cairn.launcher.backends.errors import LaunchFailed, StudyRefused
from cairn.launcher.backends.process import ProcessBackend


def pairs(argv: list[str], option: str) -> list[tuple[str, str]]:
    """(source, destination) of every `option SRC DEST` in argv."""
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == option]


def dirs_made_before(argv: list[str], index: int) -> set[str]:
    return {argv[i + 1] for i in range(index) if argv[i] == "--dir"}


@pytest.fixture
def kit(tmp_path: Path) -> Path:
    path = tmp_path / "trust" / "kits" / "site-a" / "site.creds"
    path.parent.mkdir(parents=True)
    path.write_text("seed")
    return path


def test_the_view_is_the_interpreter_the_worker_and_nothing_of_the_site(
        tmp_path: Path, kit: Path) -> None:
    protected = Protected.of([kit, tmp_path / "site"])
    box = Sandbox("/usr/bin/bwrap", sys.executable, protected=protected)
    workdir = tmp_path / "site" / "workers" / "j1_site-a_client_0_0"
    argv = box.argv(workdir, datasets=[("ct", "/srv/ct", "ro"), ("out", "/srv/out", "rw")])
    assert argv[0] == "/usr/bin/bwrap" and argv[-2:] == ["--chdir", str(workdir)]
    for flag in ("--unshare-pid", "--unshare-ipc"):
        assert flag in argv
    assert "--unshare-net" not in argv  # workers reach NATS on loopback
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--proc"] == ["/proc"]
    assert (str(workdir), str(workdir)) in pairs(argv, "--bind")
    assert ("/srv/out", "/srv/out") in pairs(argv, "--bind")
    assert ("/srv/ct", "/srv/ct") in pairs(argv, "--ro-bind")
    assert ("/etc", "/etc") not in pairs(argv, "--ro-bind")  # a few files of it, not all
    mounted = [src for opt in ("--bind", "--ro-bind", "--ro-bind-try")
               for src, _ in pairs(argv, opt)]
    for source in mounted:  # but its own folder, inside the site's
        assert source == str(workdir) or protected.problem(Path(source)) is None, source
    assert not any("nvidia" in a for a in argv)  # no GPU given, no GPU there
    # Every folder on the way to a mount point is made 0755 before the mount.
    for i, arg in enumerate(argv):
        if arg in ("--bind", "--ro-bind"):
            made = dirs_made_before(argv, i)
            for folder in Path(argv[i + 2]).parents:
                if folder.is_relative_to("/usr") or folder.is_relative_to("/sys") or \
                        str(folder) in ("/", "/tmp"):
                    continue
                assert str(folder) in made, (argv[i + 2], folder)


def test_gpus_and_capabilities_only_when_given(tmp_path: Path) -> None:
    box = Sandbox("/usr/bin/bwrap", sys.executable)
    argv = box.argv(tmp_path / "w", gpus=["0"], caps=["CAP_SETUID"])
    assert ("/dev/nvidiactl", "/dev/nvidiactl") in pairs(argv, "--dev-bind-try")
    assert argv[argv.index("--cap-add") + 1] == "CAP_SETUID"
    assert "--cap-add" not in box.argv(tmp_path / "w")


def test_a_dataset_that_holds_or_lies_in_a_secret_is_refused(tmp_path: Path, kit: Path) -> None:
    box = Sandbox("/usr/bin/bwrap", sys.executable, protected=Protected.of([kit]))
    for source in (tmp_path, kit.parent, kit.parent / "inside", tmp_path / "trust" / "root"):
        with pytest.raises(LaunchFailed, match="the sandbox does not mount it"):
            box.argv(tmp_path / "w", datasets=[("d", str(source), "ro")])
    box.argv(tmp_path / "w", datasets=[("d", str(tmp_path / "elsewhere"), "ro")])


def test_protected_paths(kit: Path, tmp_path: Path) -> None:
    protected = Protected.of([kit, None])
    # A kit under kits/ brings the trust folder around it (the root seed) along.
    assert Path(os.path.realpath(tmp_path / "trust")) in protected.paths
    assert protected.problem(Path("/")) is not None  # holds everything
    assert protected.problem(kit) is not None
    assert protected.problem(Path("/usr")) is None


def test_an_interpreter_folder_holding_a_secret_is_left_out(tmp_path: Path) -> None:
    inside = Path(sys.prefix) / "a-kit" / "site.creds"
    box = Sandbox("/usr/bin/bwrap", sys.executable, protected=Protected.of([inside]))
    assert not any(Path(sys.prefix).is_relative_to(root) for root in box.roots)
    assert any(str(Path(os.path.realpath(sys.prefix))) in s for s in box.skipped)


def test_read_only_paths_must_exist_and_hold_no_secret(tmp_path: Path, kit: Path) -> None:
    with pytest.raises(InvalidInput, match="does not exist"):
        Sandbox("/usr/bin/bwrap", sys.executable, read_only=[str(tmp_path / "nope")])
    with pytest.raises(InvalidInput, match="workers must not see it"):
        Sandbox("/usr/bin/bwrap", sys.executable, read_only=[str(tmp_path)],
                protected=Protected.of([kit]))
    box = Sandbox("/usr/bin/bwrap", sys.executable, read_only=[str(kit.parent.parent.parent)])
    assert Path(os.path.realpath(kit.parent.parent.parent)) in box.roots


def test_minimal_keeps_the_outermost() -> None:
    paths = [Path("/a/b"), Path("/a"), Path("/c/d"), Path("/usr/lib")]
    assert minimal(paths, covered=[Path("/usr")]) == [Path("/a"), Path("/c/d")]


def test_worker_uids_one_each_least_recently_used_first() -> None:
    pool = UidPool(range(1_790_000_000, 1_790_000_003))
    a, b = pool.take("a"), pool.take("b")
    assert a != b and pool.take("a") == a  # the same launch keeps its uid
    pool.release("a")
    assert pool.take("c") == 1_790_000_002  # never used before comes first
    assert pool.take("d") == a
    with pytest.raises(LaunchFailed, match=r"all 3 worker uids .* are in use"):
        pool.take("e")
    pool.claim("f", b)  # found again after a restart: still b's
    pool.release("b")
    pool.release("f")


def test_auto_uids_differ_per_site_workdir(tmp_path: Path) -> None:
    a, b = auto_range(str(tmp_path / "site-a")), auto_range(str(tmp_path / "site-b"))
    assert len(a) == len(b) == 1000 and a != b
    assert a == auto_range(str(tmp_path / "site-a"))
    assert a.start >= 1_600_000_000 and a.stop <= 1_800_000_000


def test_choose_refuses_what_it_cannot_honour(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidInput, match="sandbox 'firejail'"):
        isolation.choose("firejail", "none", workdir=tmp_path)
    monkeypatch.setattr(isolation, "find_bwrap", lambda: None)
    with pytest.raises(Unavailable, match="bwrap is not installed"):
        isolation.choose("bwrap", "none", workdir=tmp_path)
    lesser = isolation.choose("auto", "none", workdir=tmp_path)
    assert lesser.sandbox is None and "bwrap is not installed" in lesser.summary()
    monkeypatch.setattr(isolation, "can_set_uid", lambda: False)
    with pytest.raises(InvalidInput, match="must run as root"):
        isolation.choose("none", "1600000000-1600000009", workdir=tmp_path)


def test_nothing_isolated_says_so_and_refuses_untrusted_studies(tmp_path: Path) -> None:
    chosen = isolation.choose("none", "none", workdir=tmp_path)
    assert not chosen.isolated
    assert "NOT isolated" in chosen.summary() and "trusted_code: true" in chosen.summary()
    assert chosen.health() == {"sandbox": "none", "worker_uids": "none",
                               "untrusted_code": "refused"}


async def test_an_unisolated_backend_launches_only_trusted_code(tmp_path: Path) -> None:
    backend = ProcessBackend(tmp_path / "site", sandbox="none", worker_uids="none")
    spec = LaunchSpec(launch_id=make_launch_id("j1", "site-a", "client", 0, 0), job="j1",
                      study="lung", site="site-a", role="client", entrypoint="python -c pass",
                      code_dir=str(tmp_path))
    try:
        with pytest.raises(StudyRefused, match="'lung' is not marked trusted_code") as info:
            await backend.launch(spec)
        assert info.value.code == "site-policy"
        assert not (tmp_path / "site" / "workers").exists()
    finally:
        await backend.close()


def test_reading_back_follows_no_link_and_opens_no_fifo(tmp_path: Path) -> None:
    work = tmp_path / "w"
    (work / ".cairn").mkdir(parents=True)
    (tmp_path / "secret").write_text("the launcher's own")
    (work / ".cairn" / "exit.json").write_text("{}")
    assert read_under(work, ".cairn/exit.json") == b"{}"
    (work / "worker.log").symlink_to(tmp_path / "secret")
    assert read_chunk(work / "worker.log", 0) == b""
    (work / ".cairn" / "allocation.json").symlink_to(tmp_path / "secret")
    with pytest.raises(OSError):
        read_under(work, ".cairn/allocation.json")
    os.mkfifo(work / "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        read_under(work, "fifo")  # would block forever if opened for reading as it is
    (tmp_path / "other" / ".cairn").mkdir(parents=True)
    (tmp_path / "other" / ".cairn" / "exit.json").write_text("theirs")
    (work / ".cairn").rename(work / ".cairn.was")
    (work / ".cairn").symlink_to(tmp_path / "other" / ".cairn")
    with pytest.raises(OSError):
        read_under(work, ".cairn/exit.json")


def test_the_record_is_not_written_through_a_planted_link(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "w"
    (work / ".cairn").mkdir(parents=True)
    decoy = tmp_path / "decoy"
    decoy.write_text("keep")
    (work / ".cairn" / "exit.json.tmp").symlink_to(decoy)
    write_record(str(work / ".cairn" / "exit.json"), 3, None, None)
    assert decoy.read_text() == "keep"
    assert (work / ".cairn" / "exit.json").read_text().startswith('{"code": 3')
    # With `.cairn` itself a link, nothing is written anywhere, and the log says so.
    (work / ".cairn").rename(work / ".cairn.was")
    (work / ".cairn").symlink_to(tmp_path)
    write_record(str(work / ".cairn" / "exit.json"), 4, None, None)
    assert not (tmp_path / "exit.json").exists()
    assert "cannot write the exit record" in capsys.readouterr().err


def test_a_fifo_in_place_of_the_log_does_not_hang_the_launcher(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "worker.log")
    done = threading.Event()
    result: list[bytes] = []

    def read() -> None:
        result.append(read_chunk(tmp_path / "worker.log", 0))
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(10) and result == [b""]


def test_worker_uids_without_a_sandbox_say_what_they_leave_open() -> None:
    uids_only = isolation.Isolation(uids=range(1_700_000_000, 1_700_001_000))
    assert uids_only.isolated
    assert "WITHOUT a sandbox" in uids_only.summary() and "/proc" in uids_only.summary()
    assert uids_only.health() == {"sandbox": "none", "worker_uids": "1700000000-1700000999",
                                  "untrusted_code": "isolated"}
