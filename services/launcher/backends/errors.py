"""Errors a backend raises on purpose.

CairnError
├── InvalidInput            a spec the backend cannot honour (bad entrypoint, CPUs not ours)
├── Conflict                the launch id's working directory already exists
└── LaunchFailed            the worker could not be started (maps to cause `launch-failed`)
    ├── ImageNotApproved    the image is not what the site approved: its digest does not
    │                       match the one pinned (maps to cause `image-not-approved`)
    └── StudyRefused        the site will not run this study's code as it is (a process site
                            that cannot isolate workers and a study not marked trusted_code;
                            maps to cause `site-policy`)
"""

from __future__ import annotations

from cairn.errors import CairnError


class LaunchFailed(CairnError):
    """The worker could not be started; the launcher reports it with cause `launch-failed`."""

    code = "launch-failed"


class ImageNotApproved(LaunchFailed):
    """The local image is not the one the reference pins (`@sha256:`): refused; the launcher
    reports cause `image-not-approved`."""

    code = "image-not-approved"


class StudyRefused(LaunchFailed):
    """The site's own policy refuses this launch: reported with cause `site-policy`."""

    code = "site-policy"
