"""federation.yaml and the admin roles table."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cairn.errors import InvalidInput, InvalidName
from cairn.spec import Action, AdminRole, Federation, allowed, load_federation
from cairn.spec.federation import parse_federation

EXAMPLE = """\
federation: demo
hub: hub                          # the site that runs server roles
sites: [{name: hub, org: coord}, {name: site-a, org: org-a}, {name: site-b, org: org-b}]
admins: [{name: alice@org-a, org: org-a, role: project_admin}, {name: bob@org-b, org: org-b, \
role: lead}]
studies:
  lung-cancer: {sites: [hub, site-a, site-b], admins: [alice@org-a, bob@org-b]}
"""


def fed(text: str = EXAMPLE) -> Federation:
    return parse_federation(textwrap.dedent(text), "federation.yaml")


def error(text: str, cls: type[InvalidInput] = InvalidInput) -> InvalidInput:
    with pytest.raises(cls) as info:
        fed(text)
    return info.value


def test_the_jobspec_example_parses(tmp_path: Path) -> None:
    (tmp_path / "federation.yaml").write_text(EXAMPLE)
    loaded = load_federation(tmp_path / "federation.yaml")
    assert (loaded.federation, loaded.hub) == ("demo", "hub")
    assert [s.name for s in loaded.sites] == ["hub", "site-a", "site-b"]
    bob = loaded.admin("bob@org-b")
    assert bob is not None and bob.role is AdminRole.LEAD
    assert loaded.studies["lung-cancer"].sites == ("hub", "site-a", "site-b")
    assert loaded.site("site-a") is not None and loaded.site("nope") is None


@pytest.mark.parametrize(
    ("old", "new", "field", "line", "says"),
    [
        ("hub: hub", "hub: site-c", "hub", 2, "not one of the federation's sites"),
        (
            "sites: [hub, site-a, site-b]",
            "sites: [hub, site-c]",
            "studies.lung-cancer.sites[1]",
            6,
            "not a federation site",
        ),
        (
            "admins: [alice@org-a, bob@org-b]",
            "admins: [carol@org-c]",
            "studies.lung-cancer.admins[0]",
            6,
            "not a federation admin",
        ),
        (
            "{name: site-b, org: org-b}",
            "{name: site-a, org: org-b}",
            "sites[2].name",
            3,
            "listed twice",
        ),
        ("bob@org-b, org: org-b", "alice@org-a, org: org-b", "admins[1].name", 4, "listed twice"),
        ("name: bob@org-b", "name: bob smith", "admins[1].name", 4, "not an admin name"),
        ("name: bob@org-b", "name: bob@Org.B", "admins[1].name", 4, "not an admin name"),
        ("role: lead", "role: owner", "admins[1].role", 4, "invalid enum value"),
        (
            "{name: hub, org: coord}",
            "{name: hub, org: coord, ip: 1.2.3.4}",
            "sites[0].ip",
            3,
            "unknown field",
        ),
    ],
)
def test_errors_name_file_line_and_field(
    old: str, new: str, field: str, line: int, says: str
) -> None:
    exc = error(EXAMPLE.replace(old, new))
    assert (exc.file, exc.field, exc.line) == ("federation.yaml", field, line)
    assert says.lower() in exc.message.lower()


@pytest.mark.parametrize("bad", ["s1.>", "*", "A", "a.b", ""])
@pytest.mark.parametrize(
    ("old", "field"),
    [
        ("federation: demo", "federation"),
        ("{name: site-a,", "sites[1].name"),
        ("org: org-a}, {name: site-b", "sites[1].org"),
        ("lung-cancer:", "studies.{}"),
    ],
)
def test_bad_names_are_refused(bad: str, old: str, field: str) -> None:
    new = old.replace("demo", f"'{bad}'").replace("site-a,", f"'{bad}',")
    new = new.replace("org: org-a}", f"org: '{bad}'}}").replace("lung-cancer:", f"'{bad}':")
    exc = error(EXAMPLE.replace(old, new, 1), InvalidName)
    assert exc.field == field.format(bad) and exc.line is not None


# --- roles -----------------------------------------------------------------------------------

P, OA, L, M = (AdminRole.PROJECT_ADMIN, AdminRole.ORG_ADMIN, AdminRole.LEAD, AdminRole.MEMBER)
OWN: dict[str, bool] = {"own": True, "same_org": True}
ORG: dict[str, bool] = {"same_org": True}
OTHER: dict[str, bool] = {}

# (role, action, context) -> allowed; the table in cairn.spec.roles' docstring.
TABLE = [
    *[(P, a, c, True) for a in Action for c in (OWN, ORG, OTHER)],
    *[(r, Action.VIEW, c, True) for r in (OA, L, M) for c in (OWN, ORG, OTHER)],
    (OA, Action.SUBMIT, ORG, False),
    (OA, Action.CANCEL, ORG, True),
    (OA, Action.CANCEL, OTHER, False),
    (OA, Action.MANAGE_STUDY, ORG, True),
    (OA, Action.MANAGE_STUDY, OTHER, False),
    (OA, Action.CREATE_STUDY, ORG, False),
    (L, Action.SUBMIT, OTHER, True),
    (L, Action.CANCEL, OWN, True),
    (L, Action.CANCEL, ORG, True),
    (L, Action.CANCEL, OTHER, False),
    (L, Action.MANAGE_STUDY, ORG, False),
    (L, Action.CREATE_STUDY, OWN, False),
    *[(M, Action.SUBMIT, c, True) for c in (OWN, ORG, OTHER)],
    (M, Action.CANCEL, OWN, True),
    (M, Action.CANCEL, ORG, False),
    (M, Action.CANCEL, OTHER, False),
    *[(M, a, c, False) for a in (Action.MANAGE_STUDY, Action.CREATE_STUDY)
      for c in (OWN, ORG, OTHER)],
]


@pytest.mark.parametrize(("role", "action", "context", "ok"), TABLE)
def test_roles_table(role: AdminRole, action: Action, context: dict[str, bool], ok: bool) -> None:
    assert allowed(role, action, **context) is ok
    assert allowed(role.value, action.value, **context) is ok


def test_unknown_roles_and_actions_are_denied() -> None:
    assert not allowed("root", "view")
    assert not allowed("project_admin", "delete-everything")
