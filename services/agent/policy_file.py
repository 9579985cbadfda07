"""The agent's copy of `local/study_runtime.yaml`: re-read on change, last good kept."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from cairn.errors import CairnError
from cairn.spec.runtime import StudyRuntime, load_study_runtime

log = logging.getLogger("cairn.agent")


class RuntimeFile:
    """Watches one study runtime file by mtime and size."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.current: StudyRuntime | None = None
        self.error: str | None = None
        self._stamp: tuple[int, int] | None = None

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def poll(self) -> tuple[bool, str | None]:
        """Reload when the file changed. Returns (changed, error); on error the last good
        version stays in force."""
        stamp = self._file_stamp()
        if stamp == self._stamp and (stamp is not None or self.error is not None):
            return False, None
        self._stamp = stamp
        if stamp is None:
            self.error = f"{self.path}: file not found"
            return True, self.error
        try:
            runtime = load_study_runtime(self.path)
        except CairnError as exc:
            self.error = str(exc)
            log.warning("keeping the last good study runtime: %s", exc)
            return True, self.error
        except Exception as exc:  # noqa: BLE001 - a reload must never take the site offline
            self.error = f"{self.path}: cannot be read ({type(exc).__name__}: {exc})"
            log.warning("keeping the last good study runtime: %s", self.error)
            return True, self.error
        self.current = runtime
        self.error = None
        return True, None
