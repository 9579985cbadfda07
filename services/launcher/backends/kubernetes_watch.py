"""One watch of Cairn's pods in a namespace, on a thread of its own, feeding the event loop.

A watch is a blocking HTTP stream (`?watch=true`, one JSON event a line); a thread per
namespace (not per pod, and not the event loop's shared pool, which a long read would hold)
keeps it off the loop. Each request lasts `watch_s` (server side) and has a read bound a
little past that, so a stuck connection is noticed; `stop()` shuts the open one down.
Events only wake the pods' own loops, which read the pod themselves: a watch that drops or
reorders events (an API server restart, an expired resource version) delays an exit, never
loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("cairn.launcher.kubernetes")

PodEvent = Callable[[str, dict[str, Any], bool], None]
"""`(namespace, pod, deleted)`, called on the event loop."""

RETRY_S = 1.0


class NamespaceWatch:
    """Watches the pods that match `selector` in `namespace` until `stop()`."""

    def __init__(self, core: Any, namespace: str, on_event: PodEvent, *, selector: str,
                 watch_s: float) -> None:
        self.namespace = namespace
        self._core = core
        self._on_event = on_event
        self._selector = selector
        self._watch_s = max(1.0, watch_s)
        self._loop = asyncio.get_running_loop()
        self._stopping = threading.Event()
        self._response: Any = None
        self._version: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"cairn-k8s-watch-{namespace}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the watch: the open request is shut down from here, so it ends now."""
        self._stopping.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # any state: it is being closed anyway
                response.shutdown()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._watch_once()
            except Exception as exc:  # noqa: BLE001 - any failure means: watch again
                if not self._stopping.is_set():
                    log.debug("pod watch in %s ended: %s", self.namespace, exc)
                    self._stopping.wait(RETRY_S)
            finally:
                self._response = None

    def _watch_once(self) -> None:
        """One watch request, its events delivered line by line (one JSON event a line)."""
        # Resumed from the last version seen, so a renewed watch does not replay every pod;
        # bookmarks keep that version fresh while nothing of ours changes.
        resume = {"resource_version": self._version} if self._version else {}
        self._response = self._core.list_namespaced_pod(
            self.namespace, label_selector=self._selector, watch=True,
            allow_watch_bookmarks=True, timeout_seconds=int(self._watch_s),
            _request_timeout=self._watch_s + 5, _preload_content=False, **resume)
        if self._stopping.is_set():
            return
        pending = b""
        for chunk in self._response.stream(amt=None, decode_content=False):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if self._stopping.is_set():
                    return
                self._event(line)

    def _event(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return  # a blank keep-alive line, or a torn one: the pod's own read covers it
        pod = event.get("object") if isinstance(event, dict) else None
        if not isinstance(pod, dict):
            return
        kind = event.get("type")
        if kind == "ERROR":
            # 410 Gone: the version is too old to resume from; the next watch starts afresh.
            self._version = None
            return
        version = (pod.get("metadata") or {}).get("resourceVersion")
        if isinstance(version, str) and version.isdigit():
            self._version = version
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._deliver(pod, kind == "DELETED")

    def _deliver(self, pod: dict[str, Any], deleted: bool) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
            self._loop.call_soon_threadsafe(self._on_event, self.namespace, pod, deleted)
