"""One `cairn up` per directory: the lock is held while its holder runs, never by the parents
it forks, and a damaged lock file is no reason to refuse."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cairn.errors import Conflict
from cairn.runtime.dirlock import LOCK_FILE, DirLock, pid_alive, read_holder, started

CLAIM = """
import sys
from pathlib import Path
from cairn.errors import Conflict
from cairn.runtime.dirlock import DirLock
try:
    DirLock.acquire(Path(sys.argv[1]))
except Conflict as exc:
    print(exc)
    sys.exit(6)
"""


def claim_elsewhere(dir_: Path) -> subprocess.CompletedProcess[str]:
    """Another process's attempt to claim `dir_`."""
    return subprocess.run([sys.executable, "-c", CLAIM, str(dir_)], capture_output=True,
                          text=True, timeout=60, check=False)


def test_a_held_directory_is_refused_with_the_holders_pid_and_url(tmp_path: Path) -> None:
    lock = DirLock.acquire(tmp_path)
    lock.record([], url="tls://127.0.0.1:4999")
    try:
        other = claim_elsewhere(tmp_path)
        assert other.returncode == 6, other.stderr
        assert f"(pid {os.getpid()}, NATS tls://127.0.0.1:4999)" in other.stdout
    finally:
        lock.release()
    assert claim_elsewhere(tmp_path).returncode == 0, "released: free again"


def test_a_forked_child_does_not_keep_the_directory_locked(tmp_path: Path) -> None:
    lock = DirLock.acquire(tmp_path)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # a parent `cairn up` forks: it lives on, waiting, holding no lock
        os.close(write_end)
        os.read(read_end, 1)
        os._exit(0)
    os.close(read_end)
    try:
        lock.release()
        # The child is still alive, but it is not in the record, so nothing blocks.
        assert claim_elsewhere(tmp_path).returncode == 0
    finally:
        os.close(write_end)
        os.waitpid(pid, 0)


def test_what_a_dead_holder_started_and_still_runs_blocks_a_new_claim(tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = DirLock.acquire(tmp_path)
        lock.record([started("nats-server", sleeper.pid)], url="tls://127.0.0.1:4998")
        # The holder dies without releasing (as `kill -9` would): only the record stays.
        os.close(lock._fd)  # type: ignore[arg-type]
        lock._fd = None
        with pytest.raises(Conflict, match=rf"nats-server pid {sleeper.pid}.*kill {sleeper.pid}"):
            DirLock.acquire(tmp_path)
    finally:
        sleeper.kill()
        sleeper.wait()
    DirLock.acquire(tmp_path).release()  # gone: the record alone refuses nothing


@pytest.mark.parametrize("content", [b"", b"\xff\xfe garbage", b"[1, 2]", b'{"pid": "x"}',
                                     b'{"started": [{"pid": "1"}, 3]}', b"{" * 10000])
def test_a_damaged_lock_file_is_read_as_no_record(tmp_path: Path, content: bytes) -> None:
    (tmp_path / LOCK_FILE).write_bytes(content)
    holder = read_holder(tmp_path)
    assert holder is None or (holder.started == () and not holder.running())
    DirLock.acquire(tmp_path).release()


def test_a_process_is_alive_until_it_ends_and_a_zombie_is_not() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        assert pid_alive(child.pid)
        assert child.stdin is not None
        child.stdin.close()  # it ends; unreaped, it is a zombie until wait()
        deadline = time.monotonic() + 10
        while "\nState:\tZ" not in Path(f"/proc/{child.pid}/status").read_text():
            assert time.monotonic() < deadline, "the child did not end"
            os.sched_yield()
        assert not pid_alive(child.pid)
    finally:
        child.wait(timeout=10)
    assert not pid_alive(child.pid)
