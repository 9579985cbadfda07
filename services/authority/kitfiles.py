"""The authority's kit files that change while it runs: the revocation list and the trust
list (roots). Each is read again when its modification time changes; a file that does not
read keeps what was read before, and says why."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from cairn.errors import CairnError
from cairn.files import read_text
from cairn.trust.authority import Authorizer
from cairn.trust.nkeyjwt import read_roots_file

log = logging.getLogger("cairn.authority")

REVOCATIONS_MAX_BYTES = 16 * 1024 * 1024
SEED_MAX_BYTES = 4096


class KitFiles:
    """Reloads `revoked.json` and `roots.txt` of `kit` into `authorizer`."""

    def __init__(self, kit: Path, authorizer: Authorizer) -> None:
        self.kit = kit
        self.authorizer = authorizer
        self._revocations_mtime = 0.0
        self._roots_mtime = mtime(kit / "roots.txt")

    def revocations(self) -> bool:
        """Read the revocation list again if it changed; True when it was."""
        path = self.kit / "revoked.json"
        try:
            changed = path.stat().st_mtime
        except OSError:
            return False
        if changed == self._revocations_mtime:
            return False
        self._revocations_mtime = changed
        try:
            data = json.loads(read_text(path, limit=REVOCATIONS_MAX_BYTES))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
        except (CairnError, OSError, ValueError) as exc:
            log.error("%s: cannot read revocations (%s); keeping the previous ones", path, exc)
            return False
        self.authorizer.revoked_names |= set(data.get("names", []))
        self.authorizer.revoked_jtis |= set(data.get("jtis", []))
        return True

    def roots(self) -> bool:
        """Read the trust list (roots.txt) again when it changed: a root added is trusted,
        a root removed is not, without a restart. True when the roots changed."""
        path = self.kit / "roots.txt"
        changed = mtime(path)
        if changed == self._roots_mtime:
            return False
        self._roots_mtime = changed
        try:
            roots = read_roots_file(path)
        except CairnError as exc:
            log.error("cannot read the trust list (%s); keeping the previous roots", exc)
            return False
        if roots == self.authorizer.roots:
            return False
        log.info("trust list reloaded: roots %s", ", ".join(sorted(roots)))
        self.authorizer.roots = roots
        return True


def mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def seed(path: Path) -> str:
    """A key file's seed, read bounded."""
    return read_text(path, limit=SEED_MAX_BYTES).strip()
