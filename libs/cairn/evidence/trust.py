"""Trust lists and revocation lists: whose signatures count, and which keys no longer do.

A trust list is an operator file (decoded strictly):

    signers:
      - name: federation          # who this is (shown in verdicts and on the dashboard)
        role: first-party         # first-party | site | community
        key: MCowBQYDK2VwAyEA...  # the public key: PEM, or its raw 32 bytes in base64
    revoked:                      # optional; a separate revocation list has the same shape
      - key_id: 3f1c...           # hex sha256 of the raw public key (`cairn keys create`)
        reason: laptop lost

A revoked key is refused for every signature, whenever it was made: a key that leaked could
have signed anything, backdated.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from cairn import yamlfile
from cairn.errors import InvalidInput
from cairn.evidence.keys import VerifyingKey, parse_public_key

Role = Literal["first-party", "site", "community"]
ROLES: tuple[Role, ...] = ("first-party", "site", "community")


class SignerEntry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    name: str
    role: Role
    key: str
    key_id: str = ""
    """Optional: when given it must be the key's id (a check against pasting the wrong key)."""


class RevocationEntry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    key_id: str
    reason: str = ""


class TrustFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    signers: list[SignerEntry] = []
    revoked: list[RevocationEntry] = []


class RevocationFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    revoked: list[RevocationEntry] = []


@dataclass(frozen=True)
class TrustedSigner:
    """A signer whose signatures count: a name, a role and a public key."""

    name: str
    role: Role
    key: VerifyingKey

    @property
    def key_id(self) -> str:
        return self.key.key_id

    def matches(self, accepted: Sequence[str]) -> bool:
        """True when `accepted` (names or roles, as a job's `requires.signers`) allows it;
        an empty list accepts everyone trusted."""
        return not accepted or self.name in accepted or self.role in accepted


@dataclass(frozen=True)
class TrustList:
    """Trusted signers by key id, and revoked key ids with their reasons."""

    signers: dict[str, TrustedSigner] = field(default_factory=dict)
    revoked: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, signers: Iterable[TrustedSigner],
           revoked: Iterable[tuple[str, str]] = ()) -> TrustList:
        return cls(signers={s.key_id: s for s in signers}, revoked=dict(revoked))

    def with_revocations(self, revoked: Iterable[tuple[str, str]]) -> TrustList:
        return TrustList(signers=self.signers, revoked={**self.revoked, **dict(revoked)})

    def keys(self) -> dict[str, VerifyingKey]:
        """Every trusted key by id (revoked ones included: the verdict says they are)."""
        return {key_id: s.key for key_id, s in self.signers.items()}


def parse_trust(text: str, *, file: str = "<trust>") -> TrustList:
    """A trust list from YAML text.

    Raises:
        InvalidInput: naming the file, line and field (an unknown field, a bad key, a key id
            that is not the key's, one key listed twice).
    """
    doc = yamlfile.parse(text, file)
    if doc.data is None:
        # Most likely the wrong file, or one cut short: say so rather than trust no one.
        raise InvalidInput("the file is empty: a trust list names its signers "
                           "(`signers: [...]`)", file=file)
    data = yamlfile.convert(doc, TrustFile)
    signers: dict[str, TrustedSigner] = {}
    for index, entry in enumerate(data.signers):
        where = ("signers", index)
        line = doc.line_of((*where, "key"))
        try:
            key = parse_public_key(entry.key, source=file)
        except InvalidInput as exc:
            raise InvalidInput(exc.message, file=file, line=line,
                               field=f"signers[{index}].key") from None
        if entry.key_id and entry.key_id != key.key_id:
            raise InvalidInput(f"key_id {entry.key_id} is not this key's id ({key.key_id})",
                               file=file, line=doc.line_of((*where, "key_id")),
                               field=f"signers[{index}].key_id")
        if key.key_id in signers:
            raise InvalidInput(f"key already listed for {signers[key.key_id].name}",
                               file=file, line=line, field=f"signers[{index}].key")
        signers[key.key_id] = TrustedSigner(name=entry.name, role=entry.role, key=key)
    return TrustList(signers=signers, revoked={r.key_id: r.reason for r in data.revoked})


def load_trust(path: Path, revocations: Path | None = None) -> TrustList:
    """Read a trust list file, and a separate revocation list when given."""
    trust = parse_trust(yamlfile.read_text(path), file=str(path))
    if revocations is not None:
        trust = trust.with_revocations(load_revocations(revocations))
    return trust


def load_revocations(path: Path) -> list[tuple[str, str]]:
    """(key id, reason) of every key a revocation list revokes."""
    data = yamlfile.load(path, RevocationFile)
    return [(r.key_id, r.reason) for r in data.revoked]


def trust_entry(name: str, role: Role, key: VerifyingKey) -> dict[str, str]:
    """The trust-list entry for a key, as `cairn keys create` prints it."""
    return {"name": name, "role": role, "key": key.public_raw_b64(), "key_id": key.key_id}
