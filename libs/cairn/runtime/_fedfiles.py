"""The files of an embedded federation (`cairn.runtime.embedded`): federation.yaml, the
federation's evidence key and trust list, and each site's site.yaml and study runtime, each
written only where an operator has not written it already."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.files import yaml_text

if TYPE_CHECKING:
    from cairn.runtime.leaf import LeafNode

DEFAULT_STUDY = "demo"
DEFAULT_ADMIN = "admin@coord"


class FederationFiles:
    """Where an embedded federation's files are, and writing them (a mixin of
    `EmbeddedFederation`, whose fields these are)."""

    dir: Path
    sites: tuple[str, ...]
    study: str
    backends: dict[str, str]
    site_settings: dict[str, dict[str, Any]]
    leaves: dict[str, LeafNode]

    @property
    def hub(self) -> str:
        return self.sites[0]

    def site_dir(self, site: str) -> Path:
        return self.dir / "sites" / site

    def site_config(self, site: str) -> Path:
        return self.site_dir(site) / "site.yaml"

    @property
    def federation_file(self) -> Path:
        return self.dir / "federation.yaml"

    @property
    def evidence_key(self) -> Path:
        """The federation's first-party key: signs evidence (signer) and receipts
        (coordinator)."""
        return self.dir / "keys" / "federation.key"

    @property
    def trust_file(self) -> Path:
        return self.dir / "trust.yaml"

    def write_evidence_files(self) -> None:
        """The federation's key pair and a trust list naming it, unless already there."""
        from cairn.evidence.keys import create_key_files, load_signing_key
        from cairn.evidence.trust import trust_entry

        stem = self.evidence_key.with_suffix("")
        key = (load_signing_key(self.evidence_key) if self.evidence_key.exists()
               else create_key_files(stem))
        if not self.trust_file.exists():
            entry = trust_entry("federation", "first-party", key.verifying_key)
            self.trust_file.write_text(yaml_text({"signers": [entry]}))

    def write_files(self, url: str) -> None:
        """Write federation.yaml, and site.yaml + local/study_runtime.yaml per site, unless an
        operator already wrote them (their edits win)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.write_evidence_files()
        if not self.federation_file.exists():
            fed = {
                "federation": "local", "hub": self.hub,
                "sites": [{"name": s, "org": "coord" if s == self.hub else f"org-{s}"}
                          for s in self.sites],
                "admins": [{"name": DEFAULT_ADMIN, "org": "coord", "role": "project_admin"}],
                "studies": {self.study: {"sites": list(self.sites), "admins": [DEFAULT_ADMIN]}},
            }
            self.federation_file.write_text(yaml_text(fed))
        cpus = max(2, os.cpu_count() or 2)
        for site in self.sites:
            sdir = self.site_dir(site)
            (sdir / "local").mkdir(parents=True, exist_ok=True)
            (sdir / "data" / "shared").mkdir(parents=True, exist_ok=True)
            leaf = self.leaves.get(site)
            cfg = {"site": site, "federation": leaf.url if leaf else url, "worker_nats_url": url,
                   "backend": self.backends.get(site, "process"),
                   "inventory": {"gpus": 0, "cpus": cpus * 2, "memory": "8Gi"},
                   "workdir": str((sdir / "work").resolve()),
                   "runtime": "local/study_runtime.yaml"}
            cfg.update(self.site_settings.get(site, {}))
            (sdir / "site.yaml").write_text(yaml_text(cfg))
            runtime = sdir / "local" / "study_runtime.yaml"
            if not runtime.exists():
                studies = {
                    self.study: {
                        "datasets": {"shared": {"source": str((sdir / "data" / "shared")
                                                              .resolve()), "mode": "rw"}},
                        "env": {"TZ": "UTC"},
                        "limits": {"gpus": 0, "cpus": cpus * 2, "memory": "8Gi",
                                   "concurrent_jobs": 4},
                    },
                    "validation": {"limits": {"cpus": cpus * 2, "memory": "8Gi",
                                              "concurrent_jobs": 1}},
                }
                runtime.write_text(yaml_text({"format": 1, "studies": studies}))
