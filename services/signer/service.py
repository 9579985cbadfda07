"""The signer: turns each finished validation run into a signed evidence bundle.

On `validation.completed` (passed or failed; an `error` run attests nothing) it gathers the
run's events and judged snapshot, writes the bundle (see cairn.evidence.bundle), signs it with
its key (and co-signs with a second key when given), stores it in the `evidence` object store
under its sha256 and announces it on `cairn.evidence.<site>.<recipe>`. The bundle is a pure
function of the run's events (Ed25519 signatures are deterministic), so a redelivered event
produces the same bundle and the same event id: nothing is published twice.

It also takes submissions (`cairn evidence submit`): a packed bundle as the request body on
`cairn.api.validation.evidence-submit`, checked for integrity (manifest, signed subjects,
recipe digest, constraints re-run) before it is stored and announced as `submitted`.

Options (`-O key=value`): `evidence_key` (private key file; default STATE_DIR/keys/signer.key,
created on first start), `evidence_cosign_key` (a second signer), `evidence_trust` (trust
list; submissions from untrusted keys are stored but never count).
"""

from __future__ import annotations

import base64
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from cairn import api, subjects
from cairn.errors import InvalidInput, NotFound, Unavailable, Unverified
from cairn.events import FEDERATION_DECODER, EvidenceRecorded, ValidationCompleted
from cairn.evidence.bundle import build_bundle, unpack
from cairn.evidence.keys import SigningKey, create_key_files, key_paths, load_signing_key
from cairn.evidence.store import publish_bundle
from cairn.evidence.trust import TrustList, load_trust
from cairn.evidence.verify import verify_bundle
from cairn.runtime.service import Runtime, ServiceConfig
from cairn.signer.runs import SIGNED_STATUSES, judged_snapshot, outcome_of, run_events
from cairn.subjects import ApiAddress

log = logging.getLogger("cairn.signer")
SUBMIT_VERB = "evidence-submit"
INTEGRITY_CHECKS = ("envelope", "manifest", "subjects", "snapshot", "recipe", "constraints")


def signing_keys(config: ServiceConfig) -> list[SigningKey]:
    """The signer's key (created under the state dir when none is named) and co-signer."""
    options = config.options or {}
    named = options.get("evidence_key")
    if named:
        keys = [load_signing_key(Path(named))]
    elif config.state_dir:
        stem = Path(config.state_dir) / "keys" / "signer"
        private, _ = key_paths(stem)
        keys = [load_signing_key(private) if private.exists() else create_key_files(stem)]
    else:
        raise Unavailable("the signer has no key: pass -O evidence_key=FILE "
                          "(`cairn keys create`) or --state-dir")
    if options.get("evidence_cosign_key"):
        keys.append(load_signing_key(Path(options["evidence_cosign_key"])))
    return keys


class SignerService:
    name: ClassVar[str] = "signer"

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.keys = signing_keys(config)
        trust_file = (config.options or {}).get("evidence_trust")
        self.trust = load_trust(Path(trust_file)) if trust_file else TrustList()
        self.signed = 0
        self.submitted = 0
        self._ready = False
        self.rt: Runtime | None = None

    def ready(self) -> bool:
        return self._ready

    def health(self) -> dict[str, Any]:
        return {"signed": self.signed, "submitted": self.submitted,
                "keys": [k.key_id for k in self.keys]}

    @property
    def source(self) -> str:
        assert self.rt is not None
        return f"signer@{self.rt.site}"

    async def start(self, rt: Runtime) -> None:
        self.rt = rt
        await rt.bus.ensure_federation()
        await rt.consume(stream=subjects.FEDERATION_STREAM.name, durable="signer",
                         filters=[f"{subjects.ROOT}.validation.*.*.completed"],
                         decoder=FEDERATION_DECODER, handler=self._on_completed)
        await rt.serve_api(subjects.api_validation(SUBMIT_VERB), self._on_submit, queue="signer")
        self._ready = True
        log.info("signer ready: keys %s", ", ".join(k.key_id[:12] for k in self.keys))

    async def stop(self) -> None:
        self._ready = False

    async def _on_completed(self, event: Any, _delivery: Any) -> None:
        if not isinstance(event, ValidationCompleted) or event.status not in SIGNED_STATUSES:
            return
        assert self.rt is not None
        events = await run_events(self.rt.bus, event)
        outcome = outcome_of(events, await judged_snapshot(self.rt.bus, events))
        if outcome is None:
            log.warning("validation %s completed without its start in FEDERATION: not signed",
                        event.run)
            return
        files = build_bundle(outcome, self.keys)
        recorded = await self._publish(files, origin="signer")
        self.signed += 1
        log.info("evidence %s for %s/%s (%s): %s", recorded.bundle[:12], event.site,
                 event.recipe, event.run, recorded.result)

    async def _publish(self, files: dict[str, bytes], *, origin: str) -> EvidenceRecorded:
        """Store and announce a bundle, only while this signer's lease is valid: a signer
        that was frozen and wakes after its standby took over publishes nothing (the
        standby signs the same run into the same bundle, under the same id).

        Raises:
            LeaseLost: this instance is not (or no longer) the active signer.
        """
        assert self.rt is not None
        headers = self.rt.fence(self.name)
        return await publish_bundle(self.rt.bus, files, source=self.source, origin=origin,
                                    headers=headers)

    async def _on_submit(self, envelope: api.Envelope, address: ApiAddress) -> api.Result:
        assert self.rt is not None
        match envelope.request:
            case api.EvidenceSubmit(bundle_b64=data):
                pass
            case other:
                raise NotFound(f"the signer does not serve {api.verb_of(other)!r}")
        try:
            packed = base64.b64decode(data, validate=True)
        except ValueError:
            raise InvalidInput("bundle_b64 is not base64", field="bundle_b64") from None
        files = unpack(packed, source="submitted bundle")
        result = verify_bundle(files, self.trust, now=datetime.now(UTC))
        broken = [c for c in result.failed() if c.name in INTEGRITY_CHECKS]
        if broken:
            # Tampered or forged, not unreadable: the same code `cairn evidence verify` exits with.
            raise Unverified("; ".join(f"{c.name}: {c.reason}: {c.message}" for c in broken),
                               file="submitted bundle")
        recorded = await self._publish(files, origin="submitted")
        self.submitted += 1
        signature = result.check("signature")
        return api.EvidenceAccepted(bundle=recorded.bundle, site=recorded.site,
                                    recipe=recorded.recipe, result=recorded.result,
                                    trusted=signature.passed, signature=signature.message)
