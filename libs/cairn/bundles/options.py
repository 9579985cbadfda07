"""Where a GitOps bundle will live, for the deployers that point back at their own files."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class GitTarget:
    """The Git repository an Argo CD or Flux bundle is committed to."""

    repo_url: str = ""
    """Argo CD's app-of-apps reads the child Applications from here (required for argocd)."""
    path: str = "."
    """The bundle's folder inside that repository."""
    revision: str = "HEAD"

    def join(self, *parts: str) -> str:
        """A path inside the repository (`path/apps`), without `./` noise."""
        pieces = [p.strip("/") for p in (self.path, *parts) if p.strip("/") not in ("", ".")]
        return "/".join(pieces) or "."
