"""`federation.yaml` (the federation admin's file): model and loader.

It seeds the coordinator on first start; afterwards the study stream is the truth. Admin names
are people, `alice@org-a`, not subject tokens, so they follow their own pattern rather than
the name rule; everything else (federation, sites, orgs, studies) obeys the name rule.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from cairn.errors import InvalidInput
from cairn.spec._located import Located
from cairn.spec.roles import AdminRole
from cairn.yamlfile import convert, parse, read_text

ADMIN_NAME = re.compile(r"^[A-Za-z0-9._%+-]+@[a-z0-9-]+$")


class FederationSite(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    org: str


class Admin(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A person who acts in the federation; `role` decides rights (see `cairn.spec.roles`)."""

    name: str
    org: str
    role: AdminRole


class StudyMembers(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A study's participating sites and the admins who may act in it."""

    sites: tuple[str, ...] = ()
    admins: tuple[str, ...] = ()


class Federation(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A parsed federation.yaml.

    Attributes:
        federation: Federation name.
        hub: The site that runs server (hub) roles; one of `sites`.
        sites: Every site and its org.
        admins: Every admin, its org and role.
        studies: Study name -> members; sites and admins are the federation's own.
    """

    federation: str
    hub: str
    sites: tuple[FederationSite, ...]
    admins: tuple[Admin, ...] = ()
    studies: dict[str, StudyMembers] = {}

    def site(self, name: str) -> FederationSite | None:
        return next((s for s in self.sites if s.name == name), None)

    def admin(self, name: str) -> Admin | None:
        return next((a for a in self.admins if a.name == name), None)


def load_federation(path: str | Path) -> Federation:
    """Read and cross-check federation.yaml.

    Raises:
        InvalidInput: naming file, line and field (InvalidName for a bad name).
    """
    p = Path(path)
    text = read_text(p)
    return parse_federation(text, str(p))


def parse_federation(text: str, file: str = "<input>") -> Federation:
    doc = parse(text, file)
    if doc.data is None:
        raise InvalidInput("the file is empty", file=file)
    where = Located(doc)
    fed = convert(doc, Federation)
    where.name(("federation",), fed.federation, "federation")
    if not fed.sites:
        raise where.error(("sites",), "a federation needs at least one site")
    site_names = [where.name(("sites", i, "name"), s.name, "site") for i, s in enumerate(fed.sites)]
    for i, site in enumerate(fed.sites):
        where.name(("sites", i, "org"), site.org, "org")
        if site_names.index(site.name) != i:
            raise where.error(("sites", i, "name"), f"site {site.name!r} is listed twice")
    admin_names: list[str] = []
    for i, admin in enumerate(fed.admins):
        if not ADMIN_NAME.fullmatch(admin.name):
            raise where.error(
                ("admins", i, "name"),
                f"{admin.name!r} is not an admin name (write it as name@org, e.g. alice@org-a)",
            )
        where.name(("admins", i, "org"), admin.org, "org")
        if admin.name in admin_names:
            raise where.error(("admins", i, "name"), f"admin {admin.name!r} is listed twice")
        admin_names.append(admin.name)
    where.name(("hub",), fed.hub, "site")
    if fed.hub not in site_names:
        raise where.error(("hub",), f"hub {fed.hub!r} is not one of the federation's sites")
    for study, members in fed.studies.items():
        at = ("studies", study)
        where.name(at, study, "study")
        where.names((*at, "sites"), list(members.sites), "site")
        for i, member in enumerate(members.sites):
            if member not in site_names:
                raise where.error((*at, "sites", i), f"{member!r} is not a federation site")
        for i, name in enumerate(members.admins):
            if name not in admin_names:
                raise where.error((*at, "admins", i), f"{name!r} is not a federation admin")
            if members.admins.index(name) != i:
                raise where.error((*at, "admins", i), f"{name!r} is listed twice")
    return fed
