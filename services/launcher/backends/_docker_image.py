"""Which image a Docker worker runs: digest pinning made real on an engine with no registry.

An approval such as `registry.example/fl/*@sha256:*` lets a job name an image only with a
digest; this checks that the local image *is* that content before it runs.
"""

from __future__ import annotations

import re
from typing import Any

import docker.errors

from cairn.launcher.backends.errors import ImageNotApproved, LaunchFailed

_DIGEST = re.compile(r"^(?P<name>[^@]+)@(?P<digest>sha256:[0-9a-f]{64})$")


def approved_image(client: Any, reference: str) -> str:
    """What to run for `reference`: the reference itself; for one pinned by digest
    (`name[:tag]@sha256:<hex>`), the local image's id once it is shown to be that content.

    A local image's digest is its image id (the sha256 of its config: what a loaded or
    locally built image has) or one of its repo digests (what a pulled one has too). Running
    by id means a re-tag between this check and the start cannot swap the content.

    Raises:
        LaunchFailed: the image is not on the engine, or the engine cannot be reached.
        ImageNotApproved: the local image is other content than the pinned digest, or the
            digest is not known under that name here.
    """
    pinned = _DIGEST.match(reference)
    name, digest = (pinned["name"], pinned["digest"]) if pinned else (reference, None)
    tagged = ":" in name.rsplit("/", 1)[-1]
    try:
        # An engine that never pulled it cannot look a digest up by name: find the image by
        # its tag (or, untagged, by id), then compare.
        image = client.images.get(name if digest is None or tagged else digest)
    except docker.errors.ImageNotFound:
        raise LaunchFailed(f"image {reference!r} is not on this site's Docker Engine "
                           "(load or pull it first)", field="image") from None
    except docker.errors.DockerException as exc:
        raise LaunchFailed(f"the Docker Engine cannot be reached: {exc}") from exc
    if digest is None:
        return reference
    repo_digests = [str(d).rsplit("@", 1)[-1] for d in image.attrs.get("RepoDigests") or []]
    if digest != image.id and digest not in repo_digests:
        raise ImageNotApproved(
            f"image {name} here is {image.id} (repo digests: "
            f"{', '.join(repo_digests) or 'none'}), not the pinned {digest}: refused",
            field="image")
    names = [str(t).rsplit(":", 1)[0] for t in image.attrs.get("RepoTags") or []]
    names += [str(d).rsplit("@", 1)[0] for d in image.attrs.get("RepoDigests") or []]
    if not tagged and name not in names:
        raise ImageNotApproved(f"the image with digest {digest} is not named {name} here "
                               f"(it is {', '.join(names) or 'untagged'}): refused",
                               field="image")
    return str(image.id)
