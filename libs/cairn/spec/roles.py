"""Who may do what: admin roles and rights, after NVIDIA FLARE's default authorization.

    action          project_admin  org_admin            lead                 member
    view            yes            yes                  yes                  yes
    submit          yes            no                   yes                  yes
    cancel          yes            jobs of its org      own + its org's      own
    manage-study    yes            its org's sites and  no                   no
                                   admins only
    create-study    yes            no                   no                   no

`own` means the actor submitted the job; `same_org` means the job's submitter (for cancel) or
the site/admin being added or removed (for manage-study) belongs to the actor's org.

Differences from FLARE's defaults, on purpose: FLARE's lead manages only its own jobs; here a
lead may also cancel its org's jobs, so a team can stop a colleague's runaway job. A member
(FLARE: view only) may submit jobs and cancel its own, never another member's. FLARE has
no studies; an org_admin may add or remove its own org's sites and admins (a site owner may
always withdraw its site) but never touch other orgs', and only a project_admin creates studies.
Unknown roles or actions are denied, so a typo fails closed.
"""

from __future__ import annotations

from enum import StrEnum


class AdminRole(StrEnum):
    PROJECT_ADMIN = "project_admin"
    ORG_ADMIN = "org_admin"
    LEAD = "lead"
    MEMBER = "member"


class Action(StrEnum):
    SUBMIT = "submit"
    VIEW = "view"
    CANCEL = "cancel"
    MANAGE_STUDY = "manage-study"
    CREATE_STUDY = "create-study"


def allowed(role: str, action: str, *, own: bool = False, same_org: bool = False) -> bool:
    """Whether an admin with `role` may take `action` (see the table in the module docstring).

    Args:
        role: An `AdminRole` value.
        action: An `Action` value.
        own: The actor submitted the job in question.
        same_org: The job's submitter, or the site or admin acted on, is in the actor's org.
    """
    if role not in AdminRole.__members__.values() or action not in Action.__members__.values():
        return False
    role, action = AdminRole(role), Action(action)
    if role is AdminRole.PROJECT_ADMIN or action is Action.VIEW:
        return True
    if role is AdminRole.ORG_ADMIN:
        return action in (Action.CANCEL, Action.MANAGE_STUDY) and same_org
    if role is AdminRole.LEAD:
        return action is Action.SUBMIT or (action is Action.CANCEL and (own or same_org))
    return action is Action.SUBMIT or (action is Action.CANCEL and own)
